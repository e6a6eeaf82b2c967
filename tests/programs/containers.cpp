// C++ containers that outgrow a small near budget: vector, map and
// unordered_map through operator new (which reaches malloc), checked.
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <unordered_map>
#include <vector>

int main() {
  const std::size_t n = 6'000'000;  // 48 MiB of uint64_t
  std::vector<std::uint64_t> v(n);
  std::iota(v.begin(), v.end(), 1);
  std::vector<std::uint64_t> w;  // grows through reallocations
  for (std::size_t i = 0; i < n; i++) w.push_back(v[n - 1 - i] * 3);
  std::unordered_map<std::uint64_t, std::uint64_t> h;
  std::map<std::uint64_t, std::uint64_t> m;
  for (std::uint64_t i = 0; i < 200'000; i++) {
    h[i * 7919] = i;
    m[i * 104729 % 1000003] = i;
  }
  std::uint64_t sv = std::accumulate(v.begin(), v.end(), std::uint64_t{0});
  std::uint64_t sw = std::accumulate(w.begin(), w.end(), std::uint64_t{0});
  bool ok = sv == n * (n + 1) / 2 && sw == 3 * sv && h.size() == 200'000 && h[7919 * 1234] == 1234;
  std::uint64_t prev = 0;
  for (auto &kv : m) {
    ok = ok && (kv.first >= prev);
    prev = kv.first;
  }
  std::printf("containers: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
