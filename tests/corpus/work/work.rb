# Ruby: word counts, a large array sorted, strings joined, a digest.
require 'digest'
text = File.read(ARGV[0])
words = text.split
count = Hash.new(0)
words.each { |w| count[w] += 1 }
top = count.sort_by { |w, c| [-c, w] }.first(5)
puts "#{words.size} #{count.size} #{top.inspect}"
nums = words.each_with_index.map { |w, i| (w.size * 7919 + i) % 1000003 }.sort
puts Digest::SHA256.hexdigest(nums.join(","))
puts Digest::SHA256.hexdigest(text.tr("aeiou", "uoiea").reverse)
