/* salusd's configuration: what the flags set (main.c) and every part of the
 * server reads. Read-only once the server starts. */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include "tenants.h"

#include <stdbool.h>
#include <stdint.h>

#define SL_SERVER_VERSION "0.1.0"
#define SL_PROTOCOL_VERSION 1
#define SL_MAX_LISTEN 8

/* The length of a low-priority op's parts beside high-priority work
 * (executor.c): long enough that a part is mostly work, not its launch and
 * callback; short enough to fit a high-priority job's idle gaps. */
#define SL_DEFAULT_OP_PART_NS (600 * 1000ull)
/* sched/steps.h SL_STEPS_SEGMENT_NS: a low-priority step's most work */
#define SL_DEFAULT_LP_SEGMENT_NS (300 * 1000ull)
/* The longest claim a session owed share keeps between iterations
 * (--anticipate-us) */
#define SL_DEFAULT_ANTICIPATE_NS (20000 * 1000ull)
#define SL_DEFAULT_MAX_SESSIONS 1024
#define SL_DEFAULT_MAX_TENSORS 65536
/* The largest message either way: large enough for a big graph or a 16M
 * element tensor chunk, small enough that every request in flight fits in
 * memory (decode.h). Larger tensors move in chunks (WriteTensor and
 * ReadTensor offsets), larger feeds and fetches through shared memory. */
#define SL_DEFAULT_MAX_MESSAGE (64ull << 20)
/* Host memory a session's graphs and tensors may hold (graph.h): about ten
 * graphs of the largest size allowed, thousands of a typical model's. */
#define SL_DEFAULT_SESSION_METADATA (64ull << 20)
/* A connection without a session that completes no request for this long
 * is closed (transport.c: it may hold a partial message's memory). */
#define SL_DEFAULT_IDLE_TIMEOUT_MS 15000
/* ipc:// connections one uid other than root and salusd's may hold. */
#define SL_DEFAULT_MAX_CONNS_PER_USER 64

/* Defaults for every field; fill cfg.listen before starting. */
#define SL_CONFIG_DEFAULTS                                                                         \
    {                                                                                              \
        .device = "cpu", .policy = "fair", .contexts = 256, .max_message = SL_DEFAULT_MAX_MESSAGE, \
        .ipc_mode = 0600, .idle_timeout_ms = SL_DEFAULT_IDLE_TIMEOUT_MS,                           \
        .max_conns_per_user = SL_DEFAULT_MAX_CONNS_PER_USER, .metrics_mode = 0600                  \
    }

typedef struct sl_config {
    const char *listen[SL_MAX_LISTEN];
    int n_listen;
    const char *device;          /* "cpu", "cuda:0", ... */
    uint64_t memory_limit;       /* 0 = what the device reports minus a reserve */
    uint64_t lane_bytes;         /* ephemeral need of a session that declares none */
    uint64_t spread_limit;       /* lanes of their own below this much held memory */
    bool spread_set;             /* spread_limit given (default: half the memory) */
    uint64_t session_quota;      /* max persistent + ephemeral of one session; 0 = all */
    uint64_t framework_per_lane; /* workspace bytes per lane (device workspaces) */
    bool framework_set;          /* framework_per_lane given (default: the device's
                                    workspace_hint, at most a 16th of the memory) */
    bool no_inplace;             /* graphs never run element-wise ops in place */
    /* op by op (low priority beside high priority), an op predicted longer
     * than this runs in parts of about this much (kernels/ops/ops.h: matmuls);
     * 0 = SL_DEFAULT_OP_PART_NS */
    uint64_t op_part_ns;
    /* a low-priority step beside high-priority work: a segment of ops
     * whose predicted durations total at most this (sched/steps.h); 0 =
     * SL_DEFAULT_LP_SEGMENT_NS */
    uint64_t lp_segment_ns;
    /* one low-priority step on the device at a time, device-wide, not one
     * per low-priority iteration while no high-priority work is pending */
    bool lp_serial;
    /* The expected slow-down low-priority ops filled into gaps may add to a
     * high-priority iteration, as a share of its time alone (sched/gaps.h
     * fit_margin), when gap_margin_set; else the library's default */
    double gap_margin;
    bool gap_margin_set;
    /* Ablations of what a policy's capabilities (sched/scheduler.h
     * SL_POLICY_*) turn on, for measuring each mechanism alone: */
    bool no_exclusive_lanes; /* high-priority sessions share lanes like others */
    bool no_stepwise;        /* low-priority iterations run whole (no gap filling) */
    bool no_graphs;          /* every op launched on its own (replay.h) */
    bool no_gap_fill;        /* stepwise, but ops issue at once, not into gaps */
    bool no_stream_classes;  /* every lane's stream has normal priority */
    /* --partitions: compute partitions at start ("off", "auto", "auto:N",
     * "N": server/partitions.h); NULL = off */
    const char *partitions;
    bool strict_partitions; /* no loans between partitions (device.h partition_lend) */
    /* --partition-objective: the latency objective an undeclared need is
     * searched at (sched/partition.h objective), when partition_objective_set;
     * else the library's default */
    double partition_objective;
    bool partition_objective_set;
    const char *policy;
    bool strict;
    /* the longest a lane waits for a session owed share whose client is
     * between iterations (sched/scheduler.h sl_sched_set_anticipation),
     * when anticipate_set; else SL_DEFAULT_ANTICIPATE_NS. 0 = never waits */
    uint64_t anticipate_ns;
    bool anticipate_set;
    int contexts;          /* NNG contexts = requests in flight */
    uint64_t max_message;  /* NNG_OPT_RECVMAXSZ, and the most tensor bytes a reply carries */
    uint64_t max_decoding; /* decoded requests held at once (decode.h); 0 = default */
    int ipc_mode;          /* permissions of ipc:// socket files */
    /* what one client can make the server hold (0 = the SL_DEFAULT_ value);
     * over the limit a request fails with RESOURCE_EXHAUSTED */
    uint32_t max_sessions;            /* open sessions, waiting ones included */
    uint32_t expected_tenants;        /* default quotas' divisor; 0 = the default */
    uint32_t max_tensors_per_session; /* tensors of one session; as many graphs */
    uint64_t session_metadata;        /* host bytes of one session's graphs and tensors */
    uint64_t max_metadata;            /* of all sessions' together; 0 = a quarter of RAM */
    uint64_t shm_session_bytes;       /* shared memory one session may map */
    uint64_t shm_total_bytes;         /* shared memory all sessions may map */
    /* network security (transport.c) */
    bool allow_plain_tcp;        /* tcp:// and ws:// listeners allowed (trusted networks) */
    const char *tls_cert;        /* PEM certificate (chain) of tls+tcp:// listeners */
    const char *tls_key;         /* its PEM private key */
    const char *tls_ca;          /* PEM CAs: when set, clients must present a cert they sign */
    bool tls_allow_anonymous;    /* tls+tcp:// without --tls-ca: clients need no certificate */
    uint64_t idle_timeout_ms;    /* close sessionless connections idle this long; 0 = never */
    uint32_t max_conns_per_user; /* ipc:// connections per uid; 0 = no limit */
    /* bytes of requests one uid's ipc:// connections may hold while they
     * arrive; 0 = an eighth of the memory salusd may use (sl_host_memory) */
    uint64_t max_receiving_per_user;
    /* rights (tenants.h): listen[i] is an operator listener when
     * listen_operator[i]; its TLS clients must present a certificate that
     * operator_tls_ca signs, and are then operators */
    bool listen_operator[SL_MAX_LISTEN];
    const char *operator_tls_ca;
    sl_limits tenant_limits;                       /* --tenant-limits: every non-operator tenant */
    sl_limit_rule limit_rules[SL_MAX_LIMIT_RULES]; /* --user-limits, in order */
    int n_limit_rules;
    /* privileges (privileges.h), applied by salusd's main */
    const char *run_user;  /* --user: switch to it after start-up */
    const char *run_group; /* --group (default: the user's) */
    bool allow_root;       /* --allow-root: stay root, without capabilities */
    bool run_uid_set;      /* run_uid: the uid --user resolved to (set by main) */
    uint32_t run_uid;
    const char *fault_file; /* fault commands read on SIGUSR1 (fault.c) */
    /* observability (metrics.h): where /metrics is served, or NULL; the
     * CA(s) an https:// one requires client certificates of (NULL: the
     * operator CA); a unix socket's permissions; whether sessions' names
     * and tenants' uids are shown */
    const char *metrics_listen;
    const char *metrics_tls_ca;
    int metrics_mode;
    bool metrics_names;
    /* called once (an NNG thread; must not block) when an operator asks for
     * a drain (Drain request); NULL: the request is UNSUPPORTED. salusd's
     * raises SIGTERM, the same drain as a signal */
    void (*drain)(void);
    /* called once (fault thread; must not block) when a lost device cannot
     * be reset; NULL: session requests get NO_DEVICE from then on. salusd's
     * asks for a drain and exits 3, for a supervisor to restart it (CUDA's
     * sticky errors are unrecoverable in-process) */
    void (*device_dead)(void);
} sl_config;

#endif
