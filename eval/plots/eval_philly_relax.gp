# Philly: the gang baseline's waits by cause against how long a job waits
# before locality is relaxed (10 min to never): the share of each size
# class's waits that is fragmentation, and of 1-GPU jobs' that is
# fair-share (the study's Table 2 finding: small jobs wait for fair share,
# jobs above 4 GPUs for fragmentation).
# Data: eval_philly.relax_sweep.dat (philly --json, "relax_sweep").
name = "eval_philly_relax"
load plots . "/common.gnuplot"
f = results . "/eval_philly.relax_sweep.dat"
set title "Philly-like cluster: gang waits by cause vs locality relaxation"
set xlabel "locality relaxed after"
set ylabel "share of the class's waits"
set yrange [0:1]
set xrange [-0.3:*]
set key top left
plot f using 0:"fair_share_1":xtic(1) with linespoints pt 7 lc rgb "#1f77b4" title "1 GPU: fair-share", \
     f using 0:"frag_2_4" with linespoints pt 5 lc rgb "#ff7f0e" title "2-4 GPUs: fragmentation", \
     f using 0:"frag_5_8" with linespoints pt 9 lc rgb "#2ca02c" title "5-8 GPUs: fragmentation", \
     f using 0:"frag_gt8" with linespoints pt 11 lc rgb "#d62728" title ">8 GPUs: fragmentation"
