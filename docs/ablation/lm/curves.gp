# gnuplot -c curves.gp curves.dat curves.png
set terminal png size 1200,860 noenhanced
set output ARG2
set multiplot layout 2,2
set grid
set key bottom right
set ylabel 'validation accuracy %'
set yrange [41:*]
set title 'equal steps: validation accuracy'
set xlabel 'training step'
plot ARG1 index 0 using 1:4 with linespoints pointsize 0.5 title 'additive dv 1', '' index 1 using 1:4 with linespoints pointsize 0.5 title 'delta dv 1', '' index 2 using 1:4 with linespoints pointsize 0.5 title 'write_only dv 1'
set title 'equal time: validation accuracy'
set xlabel 'training seconds (evaluation excluded)'
plot ARG1 index 0 using 2:4 with linespoints pointsize 0.5 title 'additive dv 1', '' index 1 using 2:4 with linespoints pointsize 0.5 title 'delta dv 1', '' index 2 using 2:4 with linespoints pointsize 0.5 title 'write_only dv 1'
set key top right
set ylabel 'validation loss'
set yrange [*:2.05]
set title 'equal steps: validation loss'
set xlabel 'training step'
plot ARG1 index 0 using 1:3 with linespoints pointsize 0.5 title 'additive dv 1', '' index 1 using 1:3 with linespoints pointsize 0.5 title 'delta dv 1', '' index 2 using 1:3 with linespoints pointsize 0.5 title 'write_only dv 1'
set title 'equal time: validation loss'
set xlabel 'training seconds (evaluation excluded)'
plot ARG1 index 0 using 2:3 with linespoints pointsize 0.5 title 'additive dv 1', '' index 1 using 2:3 with linespoints pointsize 0.5 title 'delta dv 1', '' index 2 using 2:3 with linespoints pointsize 0.5 title 'write_only dv 1'
unset multiplot
