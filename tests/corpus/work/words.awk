# gawk: the whole text in one string grown by concatenation, gsub and
# toupper over it (new strings as large), word counts in an associative
# array, sorted traversal.
{ text = text $0 "\n"; for (i = 1; i <= NF; i++) count[$i]++ }
END {
  n = gsub(/[aeiou][a-z]/, "<&>", text)
  up = toupper(text)
  print n, length(text), length(up)
  PROCINFO["sorted_in"] = "@val_num_desc"
  k = 0
  for (w in count) { if (++k <= 5) printf "%s %d\n", w, count[w]; total++ }
  print total
  PROCINFO["sorted_in"] = "@ind_str_asc"
  h = 0
  for (w in count) h = (h * 31 + count[w] + length(w)) % 1000000007
  print h
  s = 0
  for (i = 1; i <= length(up); i += 4099) s = (s * 7 + index(substr(up, i, 64), "E")) % 1000000007
  print s
}
