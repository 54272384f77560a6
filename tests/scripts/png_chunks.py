"""PNG surgery for the damaged-image tests (converter_faults.sh, damaged_images.sh): a PNG's chunks,
and the PNG with its image data replaced, every chunk's CRC right (issue 51)."""
import struct
import zlib


def chunks(png):  # a PNG's chunks: (type, data)
    pos, out = 8, []
    while pos < len(png):
        n = int.from_bytes(png[pos:pos + 4], "big")
        out.append((png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]))
        pos += 12 + n
    return out


def with_idat(png, idat):  # the image data replaced (one IDAT), every chunk's CRC right
    out, first = png[:8], True
    for kind, body in chunks(png):
        if kind == b"IDAT":
            if not first:
                continue
            body, first = idat, False
        out += struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return out
