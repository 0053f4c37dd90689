# Fidelity: every job's JCT in the real salusd (sim:p100, client processes,
# real time) against the simulator's, per policy; the diagonal is agreement.
# Data: eval_fidelity.job_runs.dat and eval_fidelity.policies.dat
# (fidelity --json; columns by name).
name = "eval_fidelity"
load plots . "/common.gnuplot"
f = results . "/eval_fidelity.job_runs.dat"
set multiplot layout 1,2 title "Fidelity: real salusd --device sim:p100 vs the simulator, same trace"
set title "per job"
set xlabel "simulated JCT (s)"
set ylabel "real JCT (s)"
set size ratio -1
set key top left
plot for [p in "fifo srtf pack fair"] f using (strcol("policy") eq p ? column("sim_jct_s") : 1/0):"real_jct_s" with points pt 7 ps 1.2 title p, \
     x with lines dt 2 lc rgb "#888888" title "real = sim"
set size noratio
set title "average JCT per policy"
set style fill solid 0.8 border -1
set boxwidth 0.35
set ylabel "seconds"
set xlabel ""
set yrange [0:*]
set key below
g = results . "/eval_fidelity.policies.dat"
plot g using ($0 - 0.18):"sim_avg_jct_s":xtic(1) with boxes lc rgb "#1f77b4" title "simulator", \
     g using ($0 + 0.18):"real_avg_jct_s" with boxes lc rgb "#ff7f0e" title "real salusd"
unset multiplot
