#include "parallel/backend_choice.hpp"

#include "parallel/communicator.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <stdexcept>

namespace joule::parallel {

CommChoice choose_comm_backend(std::string const& requested, bool nccl_built,
                               std::vector<std::string> const& gpu_of_rank) {
  if (requested == "mpi") return {false, "asked for (parallel.backend / --comm)"};
  if (requested != "auto" && requested != "nccl")
    throw std::invalid_argument("communicator backend '" + requested + "'; allowed: auto, mpi, nccl");
  auto refuse = [&](std::string const& why) -> CommChoice {
    if (requested == "nccl") throw CommError("parallel.backend is \"nccl\", but " + why);
    return {false, why};
  };
  if (!nccl_built) return refuse("this build has no NCCL");
  std::map<std::string, int> first_rank_on;
  for (int r = 0; r < int(gpu_of_rank.size()); ++r) {
    auto const& gpu = gpu_of_rank[r];
    if (gpu.empty()) return refuse("rank " + std::to_string(r) + " has no GPU");
    auto const [it, fresh] = first_rank_on.emplace(gpu, r);
    if (!fresh)
      return refuse("ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " share GPU " + gpu +
                    ", and NCCL needs one GPU per rank: MPI with host staging");
  }
  return {true, requested == "nccl" ? "asked for (parallel.backend / --comm)" : "every rank has a GPU of its own"};
}

std::string requested_comm_backend(std::string const& config_json, std::string const& source) {
  auto const root = nlohmann::json::parse(config_json);
  auto const section = root.find("parallel");
  if (section == root.end()) return "auto";
  if (!section->is_object()) throw std::invalid_argument(source + ": parallel must be an object");
  for (auto const& item : section->items())
    if (item.key() != "backend")
      throw std::invalid_argument(source + ": parallel." + item.key() + ": unknown field (allowed in parallel: backend)");
  auto const backend = section->find("backend");
  if (backend == section->end()) return "auto";
  if (!backend->is_string() || (*backend != "auto" && *backend != "mpi" && *backend != "nccl"))
    throw std::invalid_argument(source + ": parallel.backend is " + backend->dump() + "; allowed: \"auto\", \"mpi\", \"nccl\"");
  return backend->get<std::string>();
}

}  // namespace joule::parallel
