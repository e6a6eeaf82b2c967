// include/tiermem.h compiled as C++ (scripts/ctest.sh: -std=c++17 -Wall
// -Wextra -Werror -pedantic): the header must be clean C++ and its
// declarations usable from C++ code, linkage and attributes included.
#include <tiermem.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

static_assert(std::is_standard_layout<tm_config>::value && std::is_trivial<tm_config>::value,
              "struct tm_config is plain data");
static_assert(std::is_standard_layout<tm_stats>::value && std::is_trivial<tm_stats>::value,
              "struct tm_stats is plain data");
static_assert(sizeof(tm_config) == 104 && sizeof(tm_stats) == 232, "version-2 sizes");
static_assert(noexcept(tm_version()), "tiermem functions never throw");

int main() {
  int failed = 0;
  if (tm_version() != TIERMEM_VERSION) {
    std::fprintf(stderr, "FAIL: tm_version() %d != TIERMEM_VERSION %d\n", tm_version(),
                 TIERMEM_VERSION);
    failed++;
  }
  if (std::strcmp(tm_strerror(TM_EHUGEPAGES), "not enough huge pages") != 0) {
    std::fprintf(stderr, "FAIL: tm_strerror(TM_EHUGEPAGES) = %s\n", tm_strerror(TM_EHUGEPAGES));
    failed++;
  }

  tm_config cfg;
  tm_config_init(&cfg, 8u << 20, 2u << 20);
  cfg.fault_around_off = 1;  // one zero fill per page, counted below
  tm_region *r = nullptr;
  int rc = tm_region_create(&cfg, &r);
  if (rc != TM_OK) {
    std::fprintf(stderr, "FAIL: tm_region_create: %s: %s\n", tm_strerror(rc), tm_last_error());
    return 1;
  }
  auto *p = static_cast<unsigned char *>(tm_region_base(r));
  for (std::size_t i = 0; i < tm_region_size(r); i += 4096) {
    p[i] = static_cast<unsigned char>(i >> 12);
  }
  tm_stats st{};
  st.struct_size = sizeof st;
  if (tm_region_stats(r, &st) != TM_OK || st.evictions == 0 || st.faults_zero_fill != 2048) {
    std::fprintf(stderr, "FAIL: stats: %llu evictions, %llu zero fills\n",
                 static_cast<unsigned long long>(st.evictions),
                 static_cast<unsigned long long>(st.faults_zero_fill));
    failed++;
  }
  if (tm_region_destroy(r) != TM_OK) {
    std::fprintf(stderr, "FAIL: tm_region_destroy: %s\n", tm_last_error());
    failed++;
  }

  void *g = tm_malloc_global(4096);
  if (g == nullptr || tm_free_global(g) != TM_OK) {
    std::fprintf(stderr, "FAIL: global malloc/free: %s\n", tm_last_error());
    failed++;
  }

  std::printf("test_header: %s\n", failed == 0 ? "ok" : "failed");
  return failed == 0 ? 0 : 1;
}
