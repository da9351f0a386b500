# gnuplot bench/cpu_per_step.gp (from the repository root): CPU-seconds and
# waits per step against N from bench/scaling's CSVs in bench/results.
set datafile separator ','
set terminal pngcairo size 1200,450 noenhanced
set output 'bench/results/cpu_per_step.png'
set multiplot layout 1,2 title "Cost per step against N, sync, emulated compute (2-core VM; loopback, and netns x20 for N <= 16, x40 for N = 32)"
set xlabel 'workers = servers (N)'
set logscale x 2
set xrange [0.8:40]
set grid
set key top left
set yrange [0:*]
lo = 'bench/results/cpu_per_step_loopback.csv'
x20 = 'bench/results/cpu_per_step_netns_x20.csv'
x40 = 'bench/results/cpu_per_step_netns_x40.csv'
set ylabel 'CPU ms per step (one process)'
plot lo using 3:15 every ::1 with linespoints lc 1 pt 5 title 'worker, loopback', \
     lo using 3:16 every ::1 with linespoints lc 2 pt 5 title 'server, loopback', \
     x20 using 3:15 every ::1 with linespoints lc 1 dt 2 pt 7 title 'worker, netns', \
     x20 using 3:16 every ::1 with linespoints lc 2 dt 2 pt 7 title 'server, netns', \
     x40 using 3:15 every ::1 with points lc 1 pt 7 ps 1.5 notitle, \
     x40 using 3:16 every ::1 with points lc 2 pt 7 ps 1.5 notitle
set ylabel 'waits (wake-ups) per step (one process)'
plot lo using 3:17 every ::1 with linespoints lc 1 pt 5 title 'worker, loopback', \
     lo using 3:18 every ::1 with linespoints lc 2 pt 5 title 'server, loopback', \
     x20 using 3:17 every ::1 with linespoints lc 1 dt 2 pt 7 title 'worker, netns', \
     x20 using 3:18 every ::1 with linespoints lc 2 dt 2 pt 7 title 'server, netns', \
     x40 using 3:17 every ::1 with points lc 1 pt 7 ps 1.5 notitle, \
     x40 using 3:18 every ::1 with points lc 2 pt 7 ps 1.5 notitle
unset multiplot
