-- Lua: a large array of numbers from a generator, sorted; a table of
-- strings concatenated; word counts.
local n = tonumber(arg[1])
local t, x = {}, 12345
for i = 1, n do
  x = (x * 1103515245 + 12345) % 2147483648
  t[i] = x
end
table.sort(t)
local h = 0
for i = 1, n, 7 do h = (h * 31 + t[i]) % 1000000007 end
print(n, t[1], t[n], h)
local parts = {}
for i = 1, n // 4 do parts[i] = string.format("%d:%d", i, t[i] % 1000) end
local s = table.concat(parts, ",")
print(#s, s:sub(-30))
local count = {}
for w in io.open(arg[2]):read("a"):gmatch("%a+") do count[w] = (count[w] or 0) + 1 end
local k, m = 0, 0
for w, c in pairs(count) do k = k + 1; if c > m then m = c end end
print(k, m)
