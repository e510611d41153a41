// Runs every file of the fuzz corpus (the seeds and every input that once crashed)
// through the fuzz target, built with the default toolchain: a regression test that needs
// no clang.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  DIR* d = opendir(dir.c_str());
  if (!d) {
    fprintf(stderr, "cannot open corpus directory %s\n", dir.c_str());
    return 1;
  }
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') files.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  if (files.empty()) {
    fprintf(stderr, "no corpus files in %s\n", dir.c_str());
    return 1;
  }
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string bytes = ss.str();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  printf("%zu corpus inputs ran\n", files.size());
  return 0;
}
