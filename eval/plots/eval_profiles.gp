# Job profiles: a VGG or ResNet training iteration as the nn helpers build it, timed
# on an embedded salusd --device sim:p100 (the device time salusd charges), beside
# eval/lib/graphs.c's op list on the same profile and the Salus CSV's P100
# measurement. Data: eval_profiles.rows.dat (profiles --json, "rows").
name = "eval_profiles"
load plots . "/common.gnuplot"
f = results . "/eval_profiles.rows.dat"
set title "Training iteration per model/batch: nn helpers on salusd (sim), graphs.c, measured (P100)"
set style fill solid 0.8 border -1
set boxwidth 0.25
set ylabel "iteration (ms)"
set yrange [0:*]
set xrange [-0.6:*]
plot f using ($0 - 0.27):"nn_ms":xtic(1) with boxes lc rgb "#1f77b4" title "nn helpers on salusd (sim)", \
     f using ($0):"graph_ms" with boxes lc rgb "#ff7f0e" title "graphs.c op list", \
     f using ($0 + 0.27):"measured_ms" with boxes lc rgb "#2ca02c" title "measured (Salus CSV)"
