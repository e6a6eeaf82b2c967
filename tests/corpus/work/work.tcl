# Tcl: word counts in a dict, a large list sorted, strings joined, mapped
# and reversed (new strings as large as the text).
set f [open [lindex $argv 0]]
set text [read $f]
close $f
set words [regexp -all -inline {\S+} $text]
set count [dict create]
foreach w $words { dict incr count $w }
set n [llength $words]
set nums {}
set i 0
foreach w $words { lappend nums [expr {([string length $w] * 7919 + $i) % 1000003}]; incr i }
set nums [lsort -integer $nums]
set h 0
foreach v $nums { set h [expr {($h * 31 + $v) % 1000000007}] }
set joined [join $nums ,]
set up [string toupper $text]
set mapped [string map {a 1 e 2 i 3 o 4 u 5} $up]
set rev [string reverse $mapped]
puts "$n [dict size $count] $h [string length $joined] [string range $rev 0 40] [string length $rev]"
