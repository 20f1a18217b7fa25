#include "transport/open_mpi_params.h"

#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace relax {

std::string EnvironmentChoice::prepare(const std::string& settings,
                                       const std::function<std::string(EnvironmentChoice&)>& decide) {
  std::lock_guard<std::mutex> lock(mutex_);
  int mpi_ready = 0;
  MPI_Initialized(&mpi_ready);
  if (mpi_ready || (done_ && settings_ == settings)) return description_;
  for (const std::string& name : set_) unsetenv(name.c_str());  // the settings changed: decide again
  set_.clear();
  description_ = decide(*this);
  settings_ = settings;
  done_ = true;
  return description_;
}

void EnvironmentChoice::set(const std::string& name, const std::string& value) {
  setenv(name.c_str(), value.c_str(), 1);
  set_.push_back(name);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

#ifdef OPEN_MPI
namespace {

// <prefix>/etc of the loaded libmpi, where a source or Spack build keeps its system parameter file.
std::string library_sysconfdir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash) + "/../etc";
}

std::vector<std::string> parameter_files() {
  std::vector<std::string> files;
  const std::string listed = env_or("OMPI_MCA_mca_base_param_files", "");
  if (!listed.empty()) {
    size_t start = 0;
    while (start <= listed.size()) {
      const size_t end = std::min(listed.find(':', start), listed.size());
      files.push_back(listed.substr(start, end - start));
      start = end + 1;
    }
    return files;
  }
  files.push_back(env_or("HOME", "") + "/.openmpi/mca-params.conf");
  files.push_back("/etc/openmpi/openmpi-mca-params.conf");  // Debian and Ubuntu packages
  const std::string prefix = env_or("OPAL_PREFIX", "");
  if (!prefix.empty()) files.push_back(prefix + "/etc/openmpi-mca-params.conf");
  const std::string sysconf = library_sysconfdir();
  if (!sysconf.empty()) files.push_back(sysconf + "/openmpi-mca-params.conf");
  return files;
}

}  // namespace

int open_mpi_major_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(text, &length);
  const std::string version(text, static_cast<size_t>(std::max(0, length)));
  const size_t v = version.find("Open MPI v");
  return v == std::string::npos ? 0 : std::atoi(version.c_str() + v + 10);
}

bool set_in_parameter_files(const std::vector<std::string>& names) {
  for (const std::string& path : parameter_files()) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const size_t first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      const size_t equals = line.find('=', first);
      if (equals == std::string::npos) continue;
      std::string name = line.substr(first, equals - first);
      name.erase(name.find_last_not_of(" \t") + 1);
      if (std::find(names.begin(), names.end(), name) != names.end()) return true;
    }
  }
  return false;
}

bool user_chose_parameter(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (!env_or(("OMPI_MCA_" + name).c_str(), "").empty()) return true;
  }
  return set_in_parameter_files(names);
}
#endif

}  // namespace relax
