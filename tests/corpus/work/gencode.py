# Generated sources for the compiler workloads (deterministic):
#   gencode.py c FUNCS        one large C file (many functions, switch
#                             tables, inlining work) on stdout
#   gencode.py cxx CLASSES    a template-heavy C++ file on stdout
#   gencode.py f SUBS         a Fortran module of SUBS subroutines and a
#                             program calling them, on stdout
#   gencode.py make DIR FILES FUNCS   a project of FILES C files of FUNCS
#                             functions, a Makefile and a main that prints a
#                             checksum
import os
import sys


def c_func(i, name="f"):
    cases = "\n".join(
        "    case %d: acc = acc * %d + (x >> %d) ^ t%d[(x + %d) & 63]; break;" % (k, 3 + k % 7, k % 13, i % 4, k)
        for k in range(24)
    )
    return """
static unsigned long t%d_%d[64] = {%s};
unsigned long %s%d(unsigned long x, int n) {
  unsigned long acc = %d;
  for (int j = 0; j < n; j++) {
    switch ((x + j) %% 24) {
%s
    default: acc += j;
    }
    x = x * 6364136223846793005UL + 1442695040888963407UL;
  }
  return acc;
}
""" % (i, i, ",".join(str((i * 131 + k * 977) % 100003) for k in range(64)), name, i, i, cases.replace("t%d[" % (i % 4), "t%d_%d[" % (i, i)))


def c_file(funcs, name="f", main=True):
    out = ["#include <stdio.h>"]
    out += [c_func(i, name) for i in range(funcs)]
    if main:
        out.append("int main(void) {\n  unsigned long s = 0;")
        out += ["  s ^= %s%d(%d, 100);" % (name, i, i) for i in range(funcs)]
        out.append('  printf("%lu\\n", s);\n  return 0;\n}')
    return "\n".join(out)


def cxx_file(classes):
    out = [
        "#include <map>\n#include <vector>\n#include <string>\n#include <algorithm>\n#include <numeric>\n#include <iostream>",
        "template <int N, typename T> struct Node { T v; std::vector<T> kids; T sum() const { return std::accumulate(kids.begin(), kids.end(), v) * N; } };",
    ]
    for i in range(classes):
        out.append(
            """
template <typename T> struct C%d {
  std::map<std::string, std::vector<Node<%d, T>>> m;
  void add(const std::string& k, T v) { m[k].push_back(Node<%d, T>{v, {v, v + %d}}); }
  T total() const { T t{}; for (auto& [k, v] : m) for (auto& n : v) t += n.sum(); return t; }
};
long run%d() { C%d<long> a; C%d<double> b; for (int i = 0; i < 50; i++) { a.add(std::to_string(i %% 7), i); b.add(std::to_string(i %% 5), i * 0.5); }
  std::vector<long> v(100); std::iota(v.begin(), v.end(), %d); std::sort(v.begin(), v.end(), [](long x, long y) { return (x %% 13) < (y %% 13) || ((x %% 13) == (y %% 13) && x < y); });
  return a.total() + (long)b.total() + v[7]; }"""
            % (i, i % 17 + 1, i % 17 + 1, i, i, i, i, i)
        )
    out.append("int main() { long s = 0;")
    out += ["  s += run%d();" % i for i in range(classes)]
    out.append("  std::cout << s << std::endl; }")
    return "\n".join(out)


def f_file(subs):
    out = ["module gen", "  implicit none", "contains"]
    for i in range(subs):
        out.append(
            """  subroutine s%d(a, n, r)
    integer, intent(in) :: n
    double precision, intent(inout) :: a(n, n)
    double precision, intent(out) :: r
    integer :: i, j, k
    r = 0
    do k = 1, %d
      do j = 2, n - 1
        do i = 2, n - 1
          a(i, j) = a(i, j) * %d.0d0 / %d.0d0 + 0.25d0 * (a(i - 1, j) - a(i + 1, j)) + mod(i * j + k, %d)
        end do
      end do
      where (a > 1.0d6) a = a / 1.0d3
      r = r + sum(a(:, k)) + maxval(a(k, :))
    end do
    select case (mod(int(r), %d))
    case (0)
      r = r + 1
    case (1:3)
      r = r * 0.5d0
    case default
      r = r - %d
    end select
  end subroutine s%d"""
            % (i, 2 + i % 5, 3 + i % 7, 4 + i % 7, 7 + i % 11, 5 + i % 9, i, i)
        )
    out.append("end module gen")
    out.append("program main\n  use gen\n  implicit none\n  double precision :: a(40, 40), r, t\n  a = 1\n  t = 0")
    out += ["  call s%d(a, 40, r)\n  t = t + r" % i for i in range(subs)]
    out.append("  print '(es24.15)', t\nend program main")
    return "\n".join(out)


if sys.argv[1] == "c":
    print(c_file(int(sys.argv[2])))
elif sys.argv[1] == "cxx":
    print(cxx_file(int(sys.argv[2])))
elif sys.argv[1] == "f":
    print(f_file(int(sys.argv[2])))
elif sys.argv[1] == "make":
    d, files, funcs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    os.makedirs(d, exist_ok=True)
    objs = []
    for f in range(files):
        with open(os.path.join(d, "m%d.c" % f), "w") as o:
            o.write(c_file(funcs, "m%d_" % f, main=False))
        objs.append("m%d.o" % f)
    with open(os.path.join(d, "main.c"), "w") as o:
        o.write("#include <stdio.h>\n")
        o.write("".join("unsigned long m%d_%d(unsigned long, int);\n" % (f, i) for f in range(files) for i in range(funcs)))
        o.write("int main(void) {\n  unsigned long s = 0;\n")
        o.write("".join("  s ^= m%d_%d(%d, 50);\n" % (f, i, f * funcs + i) for f in range(files) for i in range(funcs)))
        o.write('  printf("%lu\\n", s);\n  return 0;\n}\n')
    with open(os.path.join(d, "Makefile"), "w") as o:
        o.write("CFLAGS = -O2\nprog: main.o %s\n\t$(CC) -o $@ $^\n" % " ".join(objs))
