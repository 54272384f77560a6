#!/usr/bin/env bash
# The Slurm templates (apps/slurm/*.sbatch, issue 53) say only what joule accepts. For every template:
#   1. `bash -n` parses it;
#   2. it asks for the clean-stop signal (`#SBATCH --signal=`, docs/outputs.md "Signals");
#   3. every option of every `joule SUBCOMMAND ...` invocation (also `--foo=bar`, `${X:+--foo ...}`,
#      lines continued with `\`; comments skipped) appears in `JOULE SUBCOMMAND --help`;
#   4. every JOULE_* variable it sets is in docs/configuration.md's table of environment variables;
#   5. (issue 65) it runs joule's main job, `joule train --tune` with `--tune-log`; a template of
#      several ranks per node gives them the node's GPUs (`#SBATCH --gpus-per-node=`) and nowhere
#      only their own (`--gpus-per-task`, `--gpu-bind`, outside comments), so that NCCL can reach
#      every GPU by CUDA IPC; no `module load cuda/12` (joule's GH200 build uses CUDA 13).
# A failure names the template, the line and the option or variable.
# usage: slurm_templates.sh JOULE_BINARY TEMPLATE_DIR
set -euo pipefail
joule="$1" dir="$2"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
config_doc="$repo/docs/configuration.md"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# The subcommands listed under "Subcommands:" in a help text, one per line. CLI11 2.4+ writes the
# heading "SUBCOMMANDS:" and wraps long descriptions onto lines indented further than the names.
subcommands_of() {
  local in=0 line
  while IFS= read -r line; do
    if [[ $line == Subcommands:* || $line == SUBCOMMANDS:* ]]; then in=1; continue; fi
    if ((in)); then
      [[ $line =~ ^[[:space:]]{4,} && -n ${line//[[:space:]]/} ]] && continue  # a wrapped description
      [[ $line =~ ^[[:space:]]+([a-z][a-z0-9-]*)([[:space:]]|$) ]] || break
      echo "${BASH_REMATCH[1]}"
    fi
  done <<<"$1"
}

# help_of "train" / "data synth": the help text, cached (captured first, then matched: no pipes).
declare -A helps
help_of() {
  local key="_$1"  # "_": the top level's key is not empty
  if [[ -z ${helps[$key]+set} ]]; then
    local text
    # shellcheck disable=SC2086  # $1 is "SUB" or "SUB SUBSUB"
    text=$("$joule" $1 --help 2>&1) || { echo "cannot run $joule $1 --help: $text" >&2; exit 1; }
    helps[$key]=$text
  fi
  printf '%s' "${helps[$key]}"
}

top_help=$(help_of "")
mapfile -t subcommands < <(subcommands_of "$top_help")
((${#subcommands[@]} > 0)) || { echo "FAIL: no subcommands in $joule --help" >&2; exit 1; }
sub_alternatives=$(IFS='|'; echo "${subcommands[*]}")

# The documented variables: the names in the first column of the table under "## Environment variables".
documented=$(awk '/^## Environment variables/ { on = 1; next } /^## / { on = 0 }
                  on && /^\| `[A-Z_0-9]+` \|/ { split($0, c, "`"); print c[2] }' "$config_doc")
[[ $documented == *JOULE_HOST_CORES* ]] || { echo "FAIL: no environment table found in $config_doc" >&2; exit 1; }

shopt -s nullglob
templates=("$dir"/*.sbatch)
((${#templates[@]} > 0)) || { echo "FAIL: no *.sbatch in $dir" >&2; exit 1; }

option_re='(^|[[:space:]"'"'"'(+])(--[A-Za-z0-9][A-Za-z0-9-]*)(.*)$'
invocation_re="(^|[[:space:]/\"'])joule[[:space:]]+($sub_alternatives)([[:space:]].*)?$"

# check_options SUB TEXT: every option in TEXT (joule SUB's arguments) is in `joule SUB --help`.
check_options() {
  local help rest=$2 option
  help=$(help_of "$1")
  while [[ $rest =~ $option_re ]]; do
    option=${BASH_REMATCH[2]} rest=${BASH_REMATCH[3]}
    checked=$((checked + 1))
    # In the help: "  --foo TEXT", "-h,--help", "--no-energy{false}", "--foo=..."
    [[ $help =~ (^|$'\n'|[[:space:],])${option}([[:space:],{=]|$) ]] ||
      fail "$name:$number: joule $1 has no option $option (not in \`joule $1 --help\`)"
  done
}

for t in "${templates[@]}"; do
  name=$(basename "$t") before=$failures
  syntax=$(bash -n "$t" 2>&1) || fail "$name: bash -n: $syntax"
  content=$(<"$t")
  [[ $content =~ (^|$'\n')#SBATCH[[:space:]]+--signal= ]] ||
    fail "$name: no '#SBATCH --signal=' line (the clean stop before the time limit)"

  code_only=$(grep -v '^[[:space:]]*#[^S]' "$t" | grep -v '^[[:space:]]*##' || true)  # #SBATCH lines kept
  [[ $content =~ joule[[:space:]]+train[[:space:]]+--tune[[:space:]] ]] || fail "$name: no 'joule train --tune' (joule's main job)"
  [[ $content == *--tune-log* ]] || fail "$name: joule train --tune without --tune-log (the run log goes to runs/ in the working folder)"
  [[ ! $content =~ module[[:space:]]+load[[:space:]]+cuda/12 ]] || fail "$name: 'module load cuda/12...': joule's GH200 build uses CUDA 13"
  per_node=1
  [[ ! $content =~ (^|$'\n')#SBATCH[[:space:]]+--ntasks-per-node=([0-9]+) ]] || per_node=${BASH_REMATCH[2]}
  if ((per_node > 1)); then
    [[ $content =~ (^|$'\n')#SBATCH[[:space:]]+--gpus-per-node= ]] ||
      fail "$name: $per_node ranks per node but no '#SBATCH --gpus-per-node=': every rank should see the node's GPUs"
    for only_own in --gpus-per-task --gpu-bind; do
      [[ $code_only != *$only_own* ]] ||
        fail "$name: $only_own gives each rank only its own GPU (NCCL's CUDA IPC between ranks fails where GPUs are isolated)"
    done
  fi

  invocations=0 checked=0 sub="" number=0 continues=0
  while IFS= read -r line || [[ -n $line ]]; do
    number=$((number + 1))
    # Cut a comment: a '#' that starts a word (quotes are not looked at; ${#x} is kept).
    code=$line commented=0
    for ((i = 0; i < ${#code}; i++)); do
      if [[ ${code:i:1} == "#" ]] && ((i == 0)) || [[ ${code:i:1} == "#" && ${code:i-1:1} =~ [[:space:]] ]]; then
        code=${code:0:i} commented=1
        break
      fi
    done
    [[ $code =~ ^[[:space:]]*$ ]] && { sub="" continues=0; continue; }  # blank or a comment: ends a continuation
    # JOULE_* variables this line sets: NAME=..., export NAME=..., srun --export=...,NAME=...
    rest=$code
    while [[ $rest =~ (^|[^A-Za-z0-9_])(JOULE_[A-Z0-9_]+)=(.*)$ ]]; do
      var=${BASH_REMATCH[2]} rest=${BASH_REMATCH[3]}
      [[ $'\n'$documented$'\n' == *$'\n'$var$'\n'* ]] ||
        fail "$name:$number: $var is not a variable joule documents (docs/configuration.md, \"Environment variables\")"
    done
    # An option where a command should start: a `\` continuation broken by a comment or blank line.
    if ((!continues)) && [[ $code =~ ^[[:space:]]*(--?[A-Za-z][A-Za-z0-9-]*) ]]; then
      fail "$name:$number: the line starts with ${BASH_REMATCH[1]} but continues no command (a broken '\\' continuation?)"
    fi
    # The commands of the line (split at ; | &): joule's arguments are what follows `joule SUB
    # [SUBSUB]`, or the whole first command of a line that continues a joule invocation.
    IFS=';|&' read -r -a commands <<<"$code"
    current=""
    for ((k = 0; k < ${#commands[@]}; k++)); do
      args=${commands[k]} current=""
      if ((k == 0)) && [[ -n $sub ]]; then
        current=$sub
      elif [[ $args =~ $invocation_re ]]; then
        current=${BASH_REMATCH[2]} args=${BASH_REMATCH[3]}
        invocations=$((invocations + 1))
        inner=$(subcommands_of "$(help_of "$current")")
        if [[ -n $inner && $args =~ ^[[:space:]]+([a-z][a-z0-9-]*)(.*)$ ]] &&
          [[ $'\n'$inner$'\n' == *$'\n'${BASH_REMATCH[1]}$'\n'* ]]; then
          current="$current ${BASH_REMATCH[1]}" args=${BASH_REMATCH[2]}
        fi
      fi
      [[ -z $current ]] || check_options "$current" "$args"
    done
    continues=0
    ((commented)) || [[ ! $code =~ \\$ ]] || continues=1
    sub=""
    ((!continues)) || sub=$current
  done <"$t"
  ((invocations > 0)) || fail "$name: no joule invocation found"
  status=ok
  ((failures == before)) || status=FAILED
  echo "$name: $status ($invocations joule invocation(s), $checked option(s) checked)"
done

((failures == 0)) || { echo "FAIL: $failures problem(s) in ${#templates[@]} template(s)" >&2; exit 1; }
echo "PASS: ${#templates[@]} Slurm template(s)"
