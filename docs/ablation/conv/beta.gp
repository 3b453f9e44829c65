# gnuplot -c beta.gp beta.dat beta.png
set terminal png size 520,600 noenhanced
set output ARG2
set multiplot layout 2,1 rowsfirst
set grid
set xrange [0:2]
set xlabel 'beta'
set ylabel 'fraction of tokens'
set key top center
set style fill transparent solid 0.35
set title 'block 0, dv 1'
plot ARG1 index 0 using 1:2 with boxes title 'delta', '' index 1 using 1:2 with histeps linewidth 2 title 'write_only'
set title 'block 1, dv 1'
plot ARG1 index 2 using 1:2 with boxes title 'delta', '' index 3 using 1:2 with histeps linewidth 2 title 'write_only'
unset multiplot
