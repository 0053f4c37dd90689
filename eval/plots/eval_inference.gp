# Salus 5.3: inference jobs that fit one 16 GiB P100, salus against MPS
# with and without its per-process assumptions; every job's mean latency
# shared against alone.
# Data: eval_inference.fit.dat and eval_inference.per_job.dat
# (inference --json; columns by name).
name = "eval_inference"
load plots . "/common.gnuplot"
set multiplot layout 1,2 title "Salus 5.3: 14 models x 3 instances at batch 1 (paper: 42 jobs, < 5 ms added)"
f = results . "/eval_inference.fit.dat"
set title "jobs admitted on one P100"
set style fill solid 0.8 border -1
set boxwidth 0.6
set ylabel "jobs"
set yrange [0:55]
set xtics rotate by -20
set key top right
plot f using 0:"jobs":xtic(1) with boxes lc rgb "#1f77b4" title "of the 42 sessions", \
     f using 0:"capacity" with points pt 7 ps 1.5 lc rgb "#d62728" title "salus: admission's limit", \
     42 with lines dt 2 lc rgb "#888888" title "paper: 42"
unset xtics
set xtics
set title "mean latency per job, shared vs alone"
g = results . "/eval_inference.per_job.dat"
set xlabel "alone (ms)"
set ylabel "shared (ms)"
set logscale xy
set xrange [0.05:10]
set yrange [0.05:20]
set key top left
plot g using "solo_mean_ms":"shared_mean_ms" with points pt 7 lc rgb "#1f77b4" title "mean", \
     g using "solo_p99_ms":"shared_p99_ms" with points pt 6 lc rgb "#ff7f0e" title "p99", \
     x with lines dt 2 lc rgb "#888888" title "shared = alone", \
     x + 5 with lines dt 3 lc rgb "#d62728" title "alone + 5 ms"
unset multiplot
