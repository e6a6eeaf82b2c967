# perl: word counts in a hash, a large array sorted numerically, a regex
# pass and a join over the whole text.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);
local $/;
open my $f, '<', $ARGV[0] or die "$ARGV[0]: $!";
my $text = <$f>;
my %count;
$count{$_}++ for split /\s+/, $text;
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 4];
print scalar(keys %count), " @top\n";
my @n = map { (length($_) * 7919 + $count{$_}) % 1000003 } split /\s+/, $text;
my @s = sort { $a <=> $b } @n;
print scalar(@s), " ", md5_hex(join ",", @s), "\n";
(my $t = $text) =~ s/([aeiou])([a-z])/$2$1/g;
print md5_hex($t), "\n";
