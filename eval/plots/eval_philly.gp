# Philly: average and p95 JCT per scheduler, the waits split into
# fair-share (quota), capacity and fragmentation, and salus's JCT ratio
# against the gang baseline per job utilisation.
# Data: eval_philly.runs.dat, eval_philly.sweep.dat (philly --json).
name = "eval_philly"
load plots . "/common.gnuplot"
set terminal pngcairo size 1200,540 font "sans,11" noenhanced
set output results . "/" . name . ".png"
f = results . "/eval_philly.runs.dat"
g = results . "/eval_philly.sweep.dat"
set multiplot layout 1,3 title "Philly-like cluster, 512 GPUs: gang baseline vs salus packing"
set style fill solid 0.8 border -1
set boxwidth 0.35
set xtics rotate by -25
set title "JCT (min)"
set yrange [0:900]
set key top center horizontal
plot f using ($0 - 0.18):"avg_jct_min":xtic(1) with boxes lc rgb "#1f77b4" title "average", \
     f using ($0 + 0.18):"p95_jct_min" with boxes lc rgb "#aec7e8" title "p95"
set title "waits (GPU-job hours)"
set style histogram rowstacked
set style data histograms
set boxwidth 0.6
set yrange [0:2800]
set key top right vertical
plot f using "wait_quota_h":xtic(1) lc rgb "#1f77b4" title "fair-share", \
     "" using "wait_capacity_h" lc rgb "#ff7f0e" title "capacity", \
     "" using "wait_frag_h" lc rgb "#2ca02c" title "fragmentation"
set style data points
set title "salus JCT ratio vs job utilisation"
set xlabel "mean utilisation of a job alone"
set ylabel "gang avg JCT / salus avg JCT"
set xtics norotate
set xrange [0:1.05]
set yrange [0.6:1.5]
set key bottom left Left reverse
plot g using (strstrt(strcol("utilisation"), "study") ? column("mean_util") : 1/0):"jct_ratio" with linespoints pt 7 lc rgb "#1f77b4" title "study x 1, 1.25, 1.5, 2", \
     g using (strstrt(strcol("utilisation"), "all") ? column("mean_util") : 1/0):"jct_ratio" with linespoints pt 5 lc rgb "#ff7f0e" title "all jobs equal", \
     1 with lines dt 2 lc rgb "#888888" title "break-even"
unset multiplot
