/* salusd's flag table (flags.h): every flag, its help, its default and,
 * for the flags no generic kind fits, how it is parsed. */
#include "flags.h"

#include "partitions.h"
#include "scheduler.h"
#include "sl_error.h"
#include "sl_log.h"

#include <stdlib.h>

#define STR_(x) #x
#define STR(x) STR_(x)

/* What a tenant without --tenant-limits gets (tenants.h). */
#define TENANT_DEFAULTS                                                                            \
    "priority=" STR(SL_TENANT_DEFAULT_PRIORITY) ",weight=" STR(                                    \
        SL_TENANT_DEFAULT_WEIGHT) ",sessions=" STR(SL_TENANT_DEFAULT_SESSIONS) " (fewer when "     \
                                                                               "--max-sessions / " \
                                                                               "--expected-"       \
                                                                               "tenants is "       \
                                                                               "less),memory=<"    \
                                                                               "the "              \
                                                                               "device memory / "  \
                                                                               "--expected-"       \
                                                                               "tenants>"

/* The generic kinds' field, and the bool a flag also sets. */
#define FIELD(f) .offset = offsetof(sl_config, f), .width = sizeof(((sl_config *) 0)->f)
#define GIVEN(f) .given = 1 + offsetof(sl_config, f)

enum {
    SEC_LISTEN,
    SEC_MEMORY,
    SEC_SCHED,
    SEC_LIMITS,
    SEC_RIGHTS,
    SEC_PRIVILEGES,
    SEC_OBSERVE,
};

const sl_flag_section sl_flag_sections[] = {
    [SEC_LISTEN] = {"Listening and devices", NULL},
    [SEC_MEMORY] = {"Memory", NULL},
    [SEC_SCHED] = {"Scheduling", NULL},
    [SEC_LIMITS] =
        {"Limits",
         "What one client can make salusd hold; over a limit a request fails with "
         "RESOURCE_EXHAUSTED. Host memory a tenant can make salusd hold: for each of its "
         "sessions, at most --session-metadata of graphs and tensors and one reply of at most "
         "--max-message being built (a session runs one request at a time); all sessions' graphs "
         "and tensors together, at most --max-metadata; decoded requests of all tenants "
         "together, at most --max-decoding + --contexts x 1M; shared memory mapped for all "
         "sessions, at most --shm-total-bytes; requests still arriving, at most "
         "--max-receiving-per-user per uid. With the defaults: 128M per session, at most a "
         "quarter of the memory salusd may use in graphs and tensors, 768M of decoded requests "
         "(less in a small cgroup), a quarter (at most 8G) in shared memory and an eighth per uid "
         "in requests arriving; the memory salusd may use is its cgroup's memory limit where "
         "one is set, the host's RAM otherwise."},
    [SEC_RIGHTS] =
        {"Rights",
         "Operator requests (SetPolicy, other tenants' sessions, shares beyond a tenant's "
         "limits) are for root and salusd's own user over ipc://, and for clients of operator "
         "listeners; clients of ordinary tcp:// and tls+tcp:// listeners never have them. Over "
         "ipc:// a tenant is a uid; all other network clients are one tenant, 'remote'. "
         "OpenSession hints above a tenant's limit are clamped to it; SetSession above it is "
         "refused (PERMISSION_DENIED); sessions or memory beyond it are RESOURCE_EXHAUSTED. "
         "Status shows a non-operator only its own sessions, and each tenant its effective "
         "limits."},
    [SEC_PRIVILEGES] =
        {"Privileges",
         "salusd needs no root powers to serve. Started as root it switches to --user once its "
         "listeners are bound and its device is open, or refuses to start unless --allow-root."},
    [SEC_OBSERVE] = {"Observability and configuration", NULL},
};
const int sl_flag_sections_count = sizeof sl_flag_sections / sizeof sl_flag_sections[0];

static int set_listen(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_operator_listen(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_policy(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_gap_margin(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_partitions(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_partition_objective(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_tenant_limits(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_user_limits(sl_config *cfg, const char *arg, char *why, size_t why_len);
static int set_log_level(sl_config *cfg, const char *arg, char *why, size_t why_len);

/* Help texts are one paragraph of plain text, starting lower-case and
 * without a final period: --help appends "(default: ...)", the man page
 * capitalises them and appends "Default: ...". */
const sl_flag sl_flags[] = {
    /* Listening and devices */
    {.name = "listen",
     .short_opt = 'l',
     .kind = SL_FLAG_CUSTOM,
     .arg = "URL",
     .section = SEC_LISTEN,
     .help = "listen on URL (repeatable): ipc:///path, tcp://host:port or tls+tcp://host:port. "
             "An ipc:// socket's directory and every one above it must belong to root or "
             "salusd's user and not be writable by others (a missing last one is created); each "
             "ipc://PATH also gets a descriptor socket PATH.fd (shared-memory hand-over)",
     .def_text = "$SALUS_URL, else ipc://$XDG_RUNTIME_DIR/salus/salus.sock, else for root "
                 "ipc:///run/salus/salus.sock",
     .def_now = sl_flags_default_listen,
     .traits = SL_FLAG_REPEATABLE,
     .set = set_listen},
    {.name = "device",
     .short_opt = 'd',
     .kind = SL_FLAG_TEXT,
     .arg = "SPEC",
     .section = SEC_LISTEN,
     .help = "the device salusd owns: cpu, cuda[:N] or sim:PROFILE[:N]",
     .def = "cpu",
     FIELD(device)},
    {.name = "ipc-mode",
     .kind = SL_FLAG_INT,
     .arg = "MODE",
     .section = SEC_LISTEN,
     .help = "permissions of ipc:// socket files, octal (0600: salusd's user only); over ipc:// "
             "a session also belongs to the uid that opened it",
     .def = "0600",
     .traits = SL_FLAG_OCTAL,
     FIELD(ipc_mode),
     .max = 0777,
     .scale = 1},
    {.name = "allow-plain-tcp",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_LISTEN,
     .help = "allow tcp:// listeners (no encryption, no authentication: trusted networks only); "
             "refused without it",
     FIELD(allow_plain_tcp)},
    {.name = "tls-cert",
     .kind = SL_FLAG_TEXT,
     .arg = "FILE",
     .section = SEC_LISTEN,
     .help = "PEM certificate (chain) of tls+tcp:// listeners",
     FIELD(tls_cert)},
    {.name = "tls-key",
     .kind = SL_FLAG_TEXT,
     .arg = "FILE",
     .section = SEC_LISTEN,
     .help = "the PEM private key of --tls-cert",
     FIELD(tls_key)},
    {.name = "tls-ca",
     .kind = SL_FLAG_TEXT,
     .arg = "FILE",
     .section = SEC_LISTEN,
     .help = "PEM CA(s): tls+tcp:// clients must present a certificate they signed; required "
             "for tls+tcp:// unless --tls-allow-anonymous",
     FIELD(tls_ca)},
    {.name = "tls-allow-anonymous",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_LISTEN,
     .help = "tls+tcp:// clients need no certificate (anyone who can reach the port can use "
             "salusd)",
     FIELD(tls_allow_anonymous)},
    {.name = "idle-timeout",
     .kind = SL_FLAG_INT,
     .arg = "SEC",
     .section = SEC_LISTEN,
     .help = "close a connection that holds no session and completed no request for SEC "
             "seconds (a stalled partial message holds up to --max-message); 0 = never",
     .def = "15",
     FIELD(idle_timeout_ms),
     .max = 86400,
     .scale = 1000},
    {.name = "max-connections-per-user",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_LISTEN,
     .help = "ipc:// connections one uid other than root and salusd's may hold; 0 = no limit",
     .def = STR(SL_DEFAULT_MAX_CONNS_PER_USER),
     FIELD(max_conns_per_user),
     .max = 1u << 20,
     .scale = 1},
    {.name = "max-receiving-per-user",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_LISTEN,
     .help = "bytes of requests one uid other than root and salusd's may have salusd hold while "
             "they arrive: each ipc:// connection can hold a request of up to --max-message "
             "(stalled or not, with a session or without), so such a uid holds at most SIZE / "
             "--max-message connections (at least one)",
     .def_text = "an eighth of the memory salusd may use (its cgroup memory limit where lower "
                 "than the host's)",
     FIELD(max_receiving_per_user),
     .min = 1},

    /* Memory */
    {.name = "memory-limit",
     .short_opt = 'm',
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_MEMORY,
     .help = "device memory salus may use, e.g. 2G or 512M. The cpu device reports half of the "
             "host's memory, or of its cgroup's memory limit when that is lower",
     .def_text = "what the device reports, minus 5%",
     FIELD(memory_limit),
     .min = 1},
    {.name = "lane-size",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_MEMORY,
     .help = "ephemeral memory of sessions that declare none",
     .def_text = "an eighth of the memory",
     FIELD(lane_bytes),
     .min = 1},
    {.name = "session-quota",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_MEMORY,
     .help = "most persistent + ephemeral memory one session may declare",
     .def_text = "all of it",
     FIELD(session_quota),
     .min = 1},
    {.name = "framework-per-lane",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_MEMORY,
     .help = "workspace reserved with every lane: the device's scratch for its ops (oneDNN "
             "scratchpads, cuBLAS and cuDNN workspaces); an op needing more fails with "
             "RESOURCE_EXHAUSTED",
     .def_text = "32M on cpu, 64M on cuda and sim, at most a 16th of the memory",
     FIELD(framework_per_lane),
     GIVEN(framework_set)},
    {.name = "spread-limit",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_MEMORY,
     .help = "sessions get lanes of their own (run concurrently) while at most this much memory "
             "is held, then share lanes (take turns); 0 = always share",
     .def_text = "half of the memory",
     FIELD(spread_limit),
     GIVEN(spread_set)},
    {.name = "no-inplace",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_MEMORY,
     .help = "never run element-wise ops in place over a dying input (debugging: planned peaks "
             "grow)",
     FIELD(no_inplace)},

    /* Scheduling */
    {.name = "policy",
     .short_opt = 'p',
     .kind = SL_FLAG_CUSTOM,
     .arg = "NAME",
     .section = SEC_SCHED,
     .help = "iteration scheduling policy: fifo, fair, pack, rr, srtf or priority; salusctl "
             "policy NAME changes it at run time",
     .def = "fair",
     .set = set_policy},
    {.name = "strict",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "the Salus paper's non-work-conserving fifo and srtf",
     FIELD(strict)},
    {.name = "anticipate-us",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_SCHED,
     .help = "under fair, srtf, priority and pack, a lane waits up to N us for a session owed "
             "share whose client is between iterations (as long as that client's usual gap, "
             "and at most half an iteration of the session that would run instead), so that "
             "device time follows the weights whatever the clients' gaps; 0 = never waits",
     .def = "20000",
     FIELD(anticipate_ns),
     GIVEN(anticipate_set),
     .min = 0,
     .max = 1000 * 1000,
     .scale = 1000},
    {.name = "op-part-us",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_SCHED,
     .help = "under the priority policy, split a low-priority op predicted longer than N us "
             "into parts of about N us (matmuls)",
     .def = "600",
     FIELD(op_part_ns),
     .min = 1,
     .max = 10 * 1000 * 1000,
     .scale = 1000},
    {.name = "lp-segment-us",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_SCHED,
     .help = "under the priority policy, low-priority iterations beside high-priority work go "
             "in segments: runs of ops predicted to take at most N us together, so a "
             "high-priority request waits for at most one segment per low-priority job "
             "(1 = one op per segment)",
     .def = "300",
     FIELD(lp_segment_ns),
     .min = 1,
     .max = 10 * 1000 * 1000,
     .scale = 1000},
    {.name = "lp-serial",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "under the priority policy, one low-priority segment on the device at a time, "
             "device-wide, not one per low-priority job while no high-priority work is pending",
     FIELD(lp_serial)},
    {.name = "gap-margin",
     .kind = SL_FLAG_CUSTOM,
     .arg = "PCT",
     .section = SEC_SCHED,
     .help = "under the priority policy with --lp-serial, low-priority ops go into a "
             "high-priority job's idle gaps while the expected delay they add to its iterations "
             "stays under PCT % of "
             "their time alone; 0 = only ops no recorded gap would have cut short",
     .def = "5",
     .set = set_gap_margin},
    {.name = "partitions",
     .kind = SL_FLAG_CUSTOM,
     .arg = "MODE",
     .section = SEC_SCHED,
     .help = "compute partitions: an online one for high-priority lanes, the rest for the others "
             "(SMs through CUDA green contexts, core sets on cpu, modelled SMs on sim): off, N "
             "units, auto (their need searched for at --partition-objective, or declared by "
             "their sessions, then sized from their load with headroom and hysteresis), auto:N "
             "(N declared as their need) or demand (auto while a high-priority job is joined "
             "under the priority policy and, where the offline partition does not lend its "
             "units to them, a low-priority job beside it once a high-priority iteration has "
             "run, with the device shared instead while that serves the high-priority requests "
             "as well; off otherwise); salusctl partitions MODE changes it at run time",
     .def_text = "demand where the device has partitions (cpu, cuda with green contexts, sim), "
                 "off elsewhere",
     .set = set_partitions},
    {.name = "partition-objective",
     .kind = SL_FLAG_CUSTOM,
     .arg = "PCT",
     .section = SEC_SCHED,
     .help = "with partitions in auto mode and no need declared, where the offline partition "
             "does not lend its units: the online partition starts at its largest, then a search "
             "finds the fewest units on which high-priority iterations take at most PCT % more "
             "than there (MuxFlow's latency objective); 0 = no search, the smallest partition "
             "grown by load alone",
     .def = "20",
     .set = set_partition_objective},
    {.name = "strict-partitions",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "the offline partition never lends its units to high-priority work; by default it "
             "does where the device hands them over at once (cpu: the low-priority threads "
             "there run SCHED_IDLE and yield their core mid-op)",
     FIELD(strict_partitions)},
    {.name = "no-exclusive-lanes",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "for measuring the priority policy's mechanisms one at a time: high-priority "
             "sessions share lanes like the others",
     FIELD(no_exclusive_lanes)},
    {.name = "no-graphs",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "launch every op of an iteration on its own, never as a recorded graph replayed "
             "in one launch (on devices that record them: cuda, sim)",
     FIELD(no_graphs)},
    {.name = "no-stepwise",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "for measuring the priority policy's mechanisms one at a time: low-priority "
             "iterations run whole, not in steps beside high-priority work",
     FIELD(no_stepwise)},
    {.name = "no-gap-fill",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "for measuring the priority policy's mechanisms one at a time: low-priority ops "
             "issue at once, not only into high-priority work's predicted gaps",
     FIELD(no_gap_fill)},
    {.name = "no-stream-classes",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_SCHED,
     .help = "for measuring the priority policy's mechanisms one at a time: every lane's stream "
             "has normal priority, not its sessions' class's",
     FIELD(no_stream_classes)},

    /* Limits */
    {.name = "contexts",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_LIMITS,
     .help = "requests in flight at once",
     .def = "256",
     FIELD(contexts),
     .min = 1,
     .max = 65536,
     .scale = 1},
    {.name = "max-message",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_LIMITS,
     .help = "largest request accepted, and most tensor bytes one reply carries (larger tensors "
             "move in chunks, larger feeds and fetches by shared memory)",
     .def = "64M",
     FIELD(max_message),
     .min = 1024},
    {.name = "max-decoding",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_LIMITS,
     .help = "decoded requests held at once, queued ones included; over it a request larger "
             "than about 30K gets RESOURCE_EXHAUSTED. A request may take at most its size + "
             "min(32 x its size, 16M) + 64K decoded",
     .def_text = "512M, or an eighth of the memory salusd may use (its cgroup memory limit where "
                 "lower than the host's) when that is less",
     FIELD(max_decoding),
     .min = 1},
    {.name = "max-sessions",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_LIMITS,
     .help = "sessions open at once, waiting ones included",
     .def = STR(SL_DEFAULT_MAX_SESSIONS),
     FIELD(max_sessions),
     .min = 1,
     .max = 1u << 30,
     .scale = 1},
    {.name = "max-tensors-per-session",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_LIMITS,
     .help = "tensors one session may hold, and as many graphs",
     .def = STR(SL_DEFAULT_MAX_TENSORS),
     FIELD(max_tensors_per_session),
     .min = 1,
     .max = 1u << 30,
     .scale = 1},
    {.name = "session-metadata",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_LIMITS,
     .help = "host memory one session's registered graphs and tensors may hold; over it "
             "RegisterGraph and CreateTensor get RESOURCE_EXHAUSTED",
     .def = "64M",
     FIELD(session_metadata),
     .min = 1},
    {.name = "max-metadata",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_LIMITS,
     .help = "host memory all sessions' registered graphs and tensors may hold together",
     .def_text = "a quarter of the host's memory, or of salusd's cgroup memory limit where lower",
     FIELD(max_metadata),
     .min = 1},
    {.name = "shm-session-bytes",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_LIMITS,
     .help = "shared memory one session may make salusd map (its attached and staged segments)",
     .def = "1G",
     FIELD(shm_session_bytes),
     .min = 1},
    {.name = "shm-total-bytes",
     .kind = SL_FLAG_SIZE,
     .arg = "SIZE",
     .section = SEC_LIMITS,
     .help = "shared memory all sessions together may make salusd map",
     .def_text = "a quarter of the host's memory (or of salusd's cgroup memory limit where lower), "
                 "at most 8G",
     FIELD(shm_total_bytes),
     .min = 1},

    /* Rights */
    {.name = "operator-listen",
     .kind = SL_FLAG_CUSTOM,
     .arg = "URL",
     .section = SEC_RIGHTS,
     .help = "an operator listener (repeatable): tls+tcp://... whose clients must present a "
             "certificate signed by --operator-tls-ca (it uses --tls-cert and --tls-key), or, "
             "with --allow-plain-tcp, a tcp:// one whose every client is an operator (trusted "
             "networks only)",
     .traits = SL_FLAG_REPEATABLE,
     .set = set_operator_listen},
    {.name = "operator-tls-ca",
     .kind = SL_FLAG_TEXT,
     .arg = "FILE",
     .section = SEC_RIGHTS,
     .help = "PEM CA(s) signing operators' client certificates",
     FIELD(operator_tls_ca)},
    {.name = "tenant-limits",
     .kind = SL_FLAG_CUSTOM,
     .arg = "SPEC",
     .section = SEC_RIGHTS,
     .help = "limits of every non-operator tenant, SPEC a list of priority=N (highest "
             "priority), weight=W (its share of the device beside other tenants, and the highest "
             "weight its sessions may ask for among themselves), sessions=N (open at once) and "
             "memory=SIZE (what its sessions together may declare, persistent + ephemeral, and "
             "what their recorded graphs hold beyond their persistent bytes; 0 = no quota: "
             "whatever is free), e.g. priority=0,weight=1,sessions=8,memory=4G",
     .def_text = TENANT_DEFAULTS,
     .set = set_tenant_limits},
    {.name = "expected-tenants",
     .kind = SL_FLAG_INT,
     .arg = "N",
     .section = SEC_RIGHTS,
     .help = "tenants the host is shared by: unless --tenant-limits or --user-limits say "
             "otherwise, each tenant may declare the device memory (--memory-limit) / N and open "
             "at most " STR(SL_TENANT_DEFAULT_SESSIONS) " sessions (fewer when --max-sessions / N "
                                                        "is less), so that a tenant taking all it "
                                                        "may still leaves room for N - 1 others. "
                                                        "1 gives a single tenant all of the memory",
     .def = STR(SL_DEFAULT_EXPECTED_TENANTS),
     FIELD(expected_tenants),
     .min = 1,
     .max = 1u << 16,
     .scale = 1},
    {.name = "user-limits",
     .kind = SL_FLAG_CUSTOM,
     .arg = "WHO:SPEC",
     .section = SEC_RIGHTS,
     .help = "overrides for one tenant (repeatable; the last rule for a tenant wins): WHO a user "
             "name, a uid or 'remote', SPEC as for --tenant-limits",
     .traits = SL_FLAG_REPEATABLE,
     .set = set_user_limits},

    /* Privileges */
    {.name = "user",
     .kind = SL_FLAG_TEXT,
     .arg = "NAME",
     .section = SEC_PRIVILEGES,
     .help = "run as this user (name or uid) after start-up: all threads, no capabilities, "
             "checked; its ipc:// socket files are handed to it (their folder should be its, so "
             "it can remove them at exit)",
     FIELD(run_user)},
    {.name = "group",
     .kind = SL_FLAG_TEXT,
     .arg = "NAME",
     .section = SEC_PRIVILEGES,
     .help = "with --user, run as this group",
     .def_text = "the user's primary group",
     FIELD(run_group)},
    {.name = "allow-root",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_PRIVILEGES,
     .help = "stay root, giving up every capability but CAP_NET_BIND_SERVICE for a port below "
             "1024",
     FIELD(allow_root)},

    /* Observability and configuration */
    {.name = "metrics-listen",
     .kind = SL_FLAG_TEXT,
     .arg = "ADDR",
     .section = SEC_OBSERVE,
     .help = "serve Prometheus metrics at /metrics of ADDR: PORT, HOST:PORT or http://HOST:PORT "
             "(HOST 127.0.0.1 when not given); https://HOST:PORT (TLS with --tls-cert and "
             "--tls-key; scrapers must present a certificate --metrics-tls-ca signs); or "
             "unix:PATH or an absolute PATH (a unix socket, --metrics-mode). At most 8 "
             "connections per peer (a uid for local peers) and 64 in all, each dropped 10 s "
             "after it opened unless its request has come, and 10 s after that unless its answer "
             "is sent. Whoever reaches it sees every tenant's usage: keep it on loopback, a "
             "unix socket, https:// or a trusted network",
     .def_text = "off",
     FIELD(metrics_listen)},
    {.name = "metrics-tls-ca",
     .kind = SL_FLAG_TEXT,
     .arg = "FILE",
     .section = SEC_OBSERVE,
     .help = "PEM CA(s) signing the client certificates an https:// --metrics-listen requires "
             "(required with https://)",
     FIELD(metrics_tls_ca)},
    {.name = "metrics-mode",
     .kind = SL_FLAG_INT,
     .arg = "MODE",
     .section = SEC_OBSERVE,
     .help = "permissions of a unix-socket --metrics-listen, octal (0600: salusd's user only; "
             "0660: its group too); the socket belongs to salusd's user",
     .def = "0600",
     .traits = SL_FLAG_OCTAL,
     FIELD(metrics_mode),
     .max = 0777,
     .scale = 1},
    {.name = "metrics-names",
     .kind = SL_FLAG_SWITCH,
     .section = SEC_OBSERVE,
     .help = "label per-session metrics with the session's name and its tenant's uid; without "
             "it, sessions are labelled by id and tenants by a hash that is stable while salusd "
             "runs and names no one",
     FIELD(metrics_names)},
    {.name = "log-level",
     .kind = SL_FLAG_CUSTOM,
     .arg = "LEVEL",
     .section = SEC_OBSERVE,
     .help = "error, warn, info or debug",
     .def = "info",
     .set = set_log_level},
    {.name = "fault-inject",
     .kind = SL_FLAG_TEXT,
     .arg = "FILE",
     .section = SEC_OBSERVE,
     .help = "sim devices, tests: on SIGUSR1 read fault commands from FILE (alloc [N] | sticky | "
             "fatal | slow N | graph [N] | clear), then delete it; cuda takes graph and clear",
     FIELD(fault_file)},
    {.name = "config",
     .kind = SL_FLAG_ACTION,
     .arg = "FILE",
     .section = SEC_OBSERVE,
     .help = "read settings from FILE first: one 'key = value' a line, the keys being these "
             "long flags' names ('strict = true'), '#' starting a comment, values optionally in "
             "double quotes; flags given on the command line override the file, and a repeatable "
             "flag given there replaces all of the file's lines for it",
     .action = SL_FLAGS_CONFIG},
    {.name = "print-config",
     .kind = SL_FLAG_ACTION,
     .section = SEC_OBSERVE,
     .help = "print the effective settings in that format and exit: the ones given as 'key = "
             "value', the others commented out with their default",
     .action = SL_FLAGS_PRINT_CONFIG},
    {.name = "help",
     .short_opt = 'h',
     .kind = SL_FLAG_ACTION,
     .section = SEC_OBSERVE,
     .help = "print this text and exit",
     .action = SL_FLAGS_HELP},
    {.name = "version",
     .short_opt = 'V',
     .kind = SL_FLAG_ACTION,
     .section = SEC_OBSERVE,
     .help = "print the version and exit",
     .action = SL_FLAGS_VERSION},
};
const int sl_flags_count = sizeof sl_flags / sizeof sl_flags[0];
_Static_assert(sizeof sl_flags / sizeof sl_flags[0] <= SL_FLAGS_MAX, "SL_FLAGS_MAX is too small");

static int add_listener(sl_config *cfg, const char *url, bool as_operator, char *why, size_t len)
{
    if (cfg->n_listen == SL_MAX_LISTEN) {
        snprintf(why, len, "at most %d --listen and --operator-listen URLs in all", SL_MAX_LISTEN);
        return SL_EINVAL;
    }
    cfg->listen_operator[cfg->n_listen] = as_operator;
    cfg->listen[cfg->n_listen++] = url;
    return SL_OK;
}

static int set_listen(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    return add_listener(cfg, arg, false, why, why_len);
}

static int set_operator_listen(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    return add_listener(cfg, arg, true, why, why_len);
}

static int set_policy(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    if (!sl_sched_policy_find(arg)) {
        snprintf(why, why_len, "unknown policy (known: %s)", sl_sched_policy_names());
        return SL_EINVAL;
    }
    cfg->policy = arg;
    return SL_OK;
}

static int set_gap_margin(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    char *end;
    double pct = strtod(arg, &end);
    if (end == arg || *end || !(pct >= 0 && pct < 100)) {
        snprintf(why, why_len, "takes a percentage, 0 <= PCT < 100");
        return SL_EINVAL;
    }
    cfg->gap_margin = pct / 100;
    cfg->gap_margin_set = true;
    return SL_OK;
}

static int set_partitions(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    enum sl_parts_mode mode;
    unsigned units;
    if (sl_parts_parse(arg, &mode, &units) != SL_OK) {
        snprintf(why, why_len, "takes off, demand, auto, auto:N or N (N from 1 to 1000000)");
        return SL_EINVAL;
    }
    cfg->partitions = arg;
    return SL_OK;
}

static int set_partition_objective(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    char *end;
    double pct = strtod(arg, &end);
    if (end == arg || *end || !(pct >= 0 && pct <= 1000)) {
        snprintf(why, why_len, "takes a percentage, 0 <= PCT <= 1000");
        return SL_EINVAL;
    }
    cfg->partition_objective = pct / 100;
    cfg->partition_objective_set = true;
    return SL_OK;
}

static int set_tenant_limits(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    return sl_limits_parse(arg, &cfg->tenant_limits, why, why_len);
}

static int set_user_limits(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    if (cfg->n_limit_rules == SL_MAX_LIMIT_RULES) {
        snprintf(why, why_len, "at most %d rules", SL_MAX_LIMIT_RULES);
        return SL_EINVAL;
    }
    int rc = sl_limit_rule_parse(arg, &cfg->limit_rules[cfg->n_limit_rules], why, why_len);
    if (rc == SL_OK)
        cfg->n_limit_rules++;
    return rc;
}

static int set_log_level(sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    (void) cfg;
    if (sl_log_set_level(arg) != SL_OK) {
        snprintf(why, why_len, "takes error, warn, info or debug");
        return SL_EINVAL;
    }
    return SL_OK;
}
