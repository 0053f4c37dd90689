# FIKIT: the trade-off curve. hp p99 over hp alone against lp throughput
# over lp's under plain sharing, for the serial dispatch into gaps at every
# margin (one lp step device-wide; one op per step, 300 us and 1200 us
# segments) and the concurrent dispatch, per segment bound, all with
# partitions off; salusd's defaults (partitions on demand over the
# concurrent 300 us segments), the goal's corner and FIKIT's published
# point (lp 0.86 of sharing at its least hp speed-up, 1.32x over sharing,
# placed on our plain sharing's p99).
# Data: eval_fikit.sweep.dat, eval_fikit.runs.dat, eval_fikit.paper_point.dat
# (fikit --json: "sweep", "runs", "paper_point"; columns by name).
name = "eval_fikit_curve"
load plots . "/common.gnuplot"
f = results . "/eval_fikit.sweep.dat"
set title "FIKIT trade-off: hp p99 inflation against lp kept (segment bound in us)"
set xlabel "hp p99 / hp alone"
set ylabel "lp throughput / lp under plain sharing"
set logscale x
set xrange [1:4]
set yrange [0.3:1.0]
set key bottom right
gap(m, s) = (strcol("mode") eq "gap" && column("segment_us") == s) ? column("lp_vs_sharing") : 1/0
conc(s) = strcol("mode") eq "concurrent" ? column("lp_vs_sharing") : 1/0
def(s) = strcol(1) eq "salusd's_defaults" ? column("lp_vs_sharing") : 1/0
set arrow from 1.2, graph 0 to 1.2, graph 1 nohead dt 2 lc rgb "#d62728"
set arrow from 1, 0.86 to 10, 0.86 nohead dt 2 lc rgb "#d62728"
plot f using "hp_p99_inflation":(gap(0, 1)) with linespoints pt 7 lc rgb "#1f77b4" title "serial into gaps, one op per step (margins 0-0.9, none)", \
     f using "hp_p99_inflation":(gap(0, 300)) with linespoints pt 5 lc rgb "#9467bd" title "serial into gaps, 300 us segments", \
     f using "hp_p99_inflation":(gap(0, 1200)) with linespoints pt 9 lc rgb "#8c564b" title "serial into gaps, 1200 us segments", \
     f using "hp_p99_inflation":(conc(0)):(sprintf("%d", column("segment_us"))) with linespoints pt 13 lc rgb "#2ca02c" title "concurrent segments (labels: us)", \
     f using "hp_p99_inflation":(conc(0)):(sprintf("%d", column("segment_us"))) with labels offset 0,1 notitle, \
     results . "/eval_fikit.runs.dat" using "hp_p99_inflation":(def(0)) with points pt 3 ps 3 lc rgb "#000000" title "salusd's defaults", \
     results . "/eval_fikit.paper_point.dat" using "hp_p99_inflation":"lp_vs_sharing" with points pt 11 ps 2.5 lc rgb "#d62728" title "FIKIT (lp 0.86 at 1.32x over sharing)"
