# FIKIT: hp inference p50/p99 inflation against hp alone, and lp training
# throughput retained against lp alone, per configuration.
# Data: eval_fikit.runs.dat (fikit --json, "runs"; columns by name).
name = "eval_fikit"
load plots . "/common.gnuplot"
f = results . "/eval_fikit.runs.dat"
set multiplot layout 1,2 title "FIKIT: hp ResNet-50 inference beside lp training (paper: hp 1.32-16.41x faster than sharing, lp 0.86-1)"
set style fill solid 0.8 border -1
set boxwidth 0.35
set xtics rotate by -30
set title "hp latency / hp alone (log)"
set logscale y
set yrange [0.9:*]
set key top right
ok(s) = (s ne "lp_alone")
plot f using ($0 - 0.18):(ok(strcol(1)) ? column("hp_p50_inflation") : 1/0):xtic(1) with boxes lc rgb "#1f77b4" title "p50", \
     f using ($0 + 0.18):(ok(strcol(1)) ? column("hp_p99_inflation") : 1/0) with boxes lc rgb "#ff7f0e" title "p99"
unset logscale y
set title "lp throughput retained"
set yrange [0:1.05]
set boxwidth 0.6
plot f using 0:(strcol(1) ne "hp_alone" ? column("lp_retained") : 1/0):xtic(1) with boxes lc rgb "#2ca02c" title "lp kept", \
     0.86 with lines dt 2 lc rgb "#d62728" title "FIKIT: 0.86"
unset multiplot
