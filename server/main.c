/* salusd: flags, start-up in steps that unwind on failure, and a main thread
 * that only waits for SIGTERM/SIGINT to drain and exit. */
#include "config_file.h"
#include "privileges.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_text.h"
#include "sl_time.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: salusd [OPTIONS]\n"
            "\n"
            "Consolidated GPU execution server: jobs linking libsalusclient submit work one\n"
            "iteration at a time; salusd keeps their state resident and schedules them.\n"
            "\n"
            "  -l, --listen URL        listen on URL (repeatable): ipc:///path, tcp://host:port,\n"
            "                          tls+tcp://... (default: $SALUS_URL, else\n"
            "                          ipc://$XDG_RUNTIME_DIR/salus/salus.sock, else for root\n"
            "                          ipc:///run/salus/salus.sock). An ipc:// socket's directory\n"
            "                          and every one above it must belong to root or salusd's\n"
            "                          user and not be writable by others (a missing last one\n"
            "                          is created)\n"
            "  -d, --device SPEC       cpu | cuda[:N] | sim:PROFILE[:N] (default: cpu)\n"
            "  -m, --memory-limit SIZE device memory salus may use, e.g. 2G, 512M (default:\n"
            "                          what the device reports, minus 5%%)\n"
            "      --lane-size SIZE    ephemeral need of sessions that declare none (default:\n"
            "                          an eighth of the memory)\n"
            "      --session-quota SIZE  most persistent + ephemeral memory one session may\n"
            "                          declare (default: all of it)\n"
            "      --framework-per-lane SIZE  workspace reserved with every lane: the device's\n"
            "                          scratch for its ops (oneDNN scratchpads, cuBLAS/cuDNN\n"
            "                          workspaces); an op needing more fails with\n"
            "                          RESOURCE_EXHAUSTED (default: 32M on cpu, 64M on\n"
            "                          cuda and sim, at most a 16th of the memory)\n"
            "      --no-inplace        never run element-wise ops in place over a dying input\n"
            "                          (debugging: planned peaks grow)\n"
            "      --op-part-us N      under the priority policy, split a low-priority op\n"
            "                          predicted longer than N us into parts of about N us\n"
            "                          (matmuls; default 600)\n"
            "      --gap-margin PCT    under the priority policy, low-priority ops go into a\n"
            "                          high-priority job's idle gaps while the expected delay\n"
            "                          they add to its iterations stays under PCT %% of their\n"
            "                          time alone (default 5; 0 = only ops no recorded gap\n"
            "                          would have cut short)\n"
            "      --partitions MODE   compute partitions: an online one for high-priority\n"
            "                          lanes, the rest for the others: off, N units (SMs,\n"
            "                          cores), auto (sized from load), auto:N (N declared as\n"
            "                          the online lanes' need) or demand (auto while a\n"
            "                          high-priority job is joined under the priority\n"
            "                          policy; the default where the offline partition\n"
            "                          lends its units to high-priority work: cpu; off\n"
            "                          elsewhere); salusctl partitions MODE at run time\n"
            "      --strict-partitions the offline partition never lends its units to\n"
            "                          high-priority work (by default it does where the\n"
            "                          device hands them over at once: cpu)\n"
            "      --no-exclusive-lanes, --no-stepwise, --no-gap-fill, --no-stream-classes\n"
            "                          turn off one of the priority policy's mechanisms\n"
            "                          (measuring each alone): high-priority sessions' own\n"
            "                          lanes; low-priority iterations op by op, one op on the\n"
            "                          device at a time; those ops only into predicted gaps;\n"
            "                          lane streams of their sessions' class\n"
            "      --spread-limit SIZE sessions get lanes of their own (run concurrently)\n"
            "                          while at most this much memory is held, then share\n"
            "                          lanes (take turns); 0 = always share (default: half)\n"
            "  -p, --policy NAME       iteration scheduling policy: %s (default: fair)\n"
            "      --strict            the Salus paper's non-work-conserving fifo/srtf\n"
            "      --contexts N        requests in flight at once (default: 256)\n"
            "      --max-message SIZE  largest request accepted, and most tensor bytes one\n"
            "                          reply carries (default: 64M; larger tensors move in\n"
            "                          chunks, larger feeds and fetches by shared memory)\n"
            "      --max-decoding SIZE decoded requests held at once, queued ones included;\n"
            "                          over it a request larger than about 30K gets\n"
            "                          RESOURCE_EXHAUSTED (default: 512M). A request may take\n"
            "                          at most its size + min(32 x its size, 16M) + 64K\n"
            "                          decoded\n"
            "      --max-sessions N    sessions open at once, waiting ones included (default: %d)\n"
            "      --max-tensors-per-session N  tensors one session may hold, and as many\n"
            "                          graphs (default: %d)\n"
            "      --session-metadata SIZE  host memory one session's registered graphs and\n"
            "                          tensors may hold; over it RegisterGraph and\n"
            "                          CreateTensor get RESOURCE_EXHAUSTED (default: 64M)\n"
            "      --max-metadata SIZE the same for all sessions together (default: a quarter\n"
            "                          of the host's memory)\n"
            "      --ipc-mode MODE     permissions of ipc:// socket files, octal (default: 0600:\n"
            "                          salusd's user only); over ipc:// a session also belongs\n"
            "                          to the uid that opened it. Each ipc://PATH also gets a\n"
            "                          descriptor socket PATH.fd (shared-memory hand-over)\n"
            "      --shm-session-bytes SIZE  shared memory one session may make salusd map\n"
            "                          (its attached and staged segments; default: 1G)\n"
            "      --shm-total-bytes SIZE  shared memory all sessions together may make\n"
            "                          salusd map (default: a quarter of the host's memory,\n"
            "                          at most 8G)\n"
            "      --tls-cert FILE     PEM certificate (chain) for tls+tcp:// listeners\n"
            "      --tls-key FILE      its PEM private key\n"
            "      --tls-ca FILE       PEM CA(s): tls+tcp:// clients must present a certificate\n"
            "                          they signed; required for tls+tcp:// unless\n"
            "      --tls-allow-anonymous  tls+tcp:// clients need no certificate (anyone who can\n"
            "                          reach the port can use salusd)\n"
            "      --idle-timeout SEC  close a connection that holds no session and completed\n"
            "                          no request for SEC seconds (a stalled partial message\n"
            "                          holds up to --max-message); 0 = never (default: %d)\n"
            "      --max-connections-per-user N  ipc:// connections one uid other than root\n"
            "                          and salusd's may hold; 0 = no limit (default: %d)\n"
            "      --allow-plain-tcp   allow tcp:// listeners (no encryption, no authentication:\n"
            "                          trusted networks only); refused without it\n"
            "\n"
            "Rights. Operator requests (SetPolicy, other tenants' sessions, shares beyond a\n"
            "tenant's limits) are for root and salusd's own user over ipc://, and for clients\n"
            "of operator listeners; clients of ordinary tcp:// and tls+tcp:// listeners never\n"
            "have them. Over ipc:// a tenant is a uid; all other network clients are one\n"
            "tenant, 'remote'. Status shows a non-operator only its own sessions.\n"
            "      --operator-listen URL  an operator listener (repeatable): tls+tcp://...\n"
            "                          whose clients must present a certificate signed by\n"
            "                          --operator-tls-ca (uses --tls-cert/--tls-key), or, with\n"
            "                          --allow-plain-tcp, a tcp:// one whose every client is an\n"
            "                          operator (trusted networks only)\n"
            "      --operator-tls-ca FILE  PEM CA(s) signing operators' client certificates\n"
            "      --tenant-limits SPEC  limits of every non-operator tenant, SPEC a list of\n"
            "                          priority=N (highest priority), weight=W (highest\n"
            "                          fair-share weight), sessions=N (open at once),\n"
            "                          memory=SIZE (what its sessions together may declare,\n"
            "                          persistent + ephemeral; 0 = no quota of its own), e.g.\n"
            "                          priority=0,weight=1,sessions=8,memory=4G (default:\n"
            "                          priority=%d,weight=%g,sessions=<max-sessions/%d>)\n"
            "      --user-limits WHO:SPEC  overrides for one tenant (repeatable; the last\n"
            "                          wins): WHO a user name, a uid, or 'remote'\n"
            "                          OpenSession hints above a limit are clamped to it;\n"
            "                          SetSession above it is refused (PERMISSION_DENIED);\n"
            "                          sessions or memory beyond it are RESOURCE_EXHAUSTED.\n"
            "                          Status shows each tenant its effective limits.\n"
            "\n"
            "Privileges. salusd needs no root powers to serve. Started as root it switches\n"
            "to --user once its listeners are bound and its device is open, or refuses to\n"
            "start unless --allow-root.\n"
            "      --user NAME         run as this user (name or uid) after start-up: all\n"
            "                          threads, no capabilities, checked; its ipc:// socket\n"
            "                          files are handed to it (their folder should be its,\n"
            "                          so it can remove them at exit)\n"
            "      --group NAME        and this group (default: the user's primary group)\n"
            "      --allow-root        stay root, giving up every capability but\n"
            "                          CAP_NET_BIND_SERVICE for a port below 1024\n"
            "\n"
            "      --fault-inject FILE sim devices, tests: on SIGUSR1 read fault commands from\n"
            "                          FILE (alloc [N] | sticky | fatal | slow N | clear), then\n"
            "                          delete it\n"
            "      --log-level LEVEL   error | warn | info | debug (default: info)\n"
            "\n"
            "Observability and configuration.\n"
            "      --metrics-listen ADDR  serve Prometheus metrics at http://ADDR/metrics: PORT,\n"
            "                          HOST:PORT or http://HOST:PORT (default: off; HOST\n"
            "                          127.0.0.1). Whoever reaches it sees every tenant's\n"
            "                          sessions and usage: keep it on loopback or a trusted net\n"
            "      --config FILE       read settings from FILE first: one 'key = value' a line,\n"
            "                          the keys being these long flags' names ('strict = true'),\n"
            "                          '#' comments; flags given here override the file\n"
            "      --print-config      print the effective settings in that format and exit\n"
            "  -h, --help              this text\n"
            "  -V, --version           print the version\n"
            "\n"
            "SIGTERM or SIGINT drains: running iterations finish, queued ones fail with\n"
            "SHUTTING_DOWN, then salusd exits 0. After a sticky device error salusd resets the\n"
            "device; sessions get DEVICE_RESET once and re-upload their tensors. If the device\n"
            "cannot be recovered in-process, salusd drains and exits 3 (restart it).\n"
            "\n"
            "Host memory a tenant can make salusd hold: for each of its sessions, at most\n"
            "--session-metadata of graphs and tensors and one reply of at most --max-message\n"
            "being built (a session runs one request at a time); all sessions' graphs and\n"
            "tensors together, at most --max-metadata; decoded requests of all tenants\n"
            "together, at most --max-decoding + --contexts x 1M. With the defaults: 128M\n"
            "per session (S sessions: S x 128M, S <= the tenant's sessions limit), at most a "
            "quarter of\n"
            "the host's memory in graphs and tensors, and 768M of decoded requests.\n",
            sl_sched_policy_names(), SL_DEFAULT_MAX_SESSIONS, SL_DEFAULT_MAX_TENSORS,
            SL_DEFAULT_IDLE_TIMEOUT_MS / 1000, SL_DEFAULT_MAX_CONNS_PER_USER,
            SL_TENANT_DEFAULT_PRIORITY, SL_TENANT_DEFAULT_WEIGHT, SL_TENANT_DEFAULT_SESSIONS_DIV);
}

/* Listener and fault-injection flags that cannot work together. */
static int check_security(const sl_config *cfg)
{
    bool tls = false;
    for (int i = 0; i < cfg->n_listen; i++) {
        if (sl_url_is_plain_network(cfg->listen[i]) && !cfg->allow_plain_tcp) {
            fprintf(stderr,
                    "salusd: refusing to listen on %s: plain tcp is unauthenticated and "
                    "unencrypted. Use tls+tcp:// with --tls-cert and --tls-key, or pass "
                    "--allow-plain-tcp for a trusted network.\n",
                    cfg->listen[i]);
            return 2;
        }
        tls |= sl_url_is_tls(cfg->listen[i]);
    }
    bool operator_tls = false;
    for (int i = 0; i < cfg->n_listen; i++) {
        if (!cfg->listen_operator[i])
            continue;
        if (!sl_url_is_tls(cfg->listen[i]) && !sl_url_is_plain_network(cfg->listen[i])) {
            fprintf(stderr,
                    "salusd: --operator-listen %s: operator listeners are tls+tcp:// (or tcp:// "
                    "with --allow-plain-tcp); over ipc:// root and salusd's user are operators "
                    "already\n",
                    cfg->listen[i]);
            return 2;
        }
        operator_tls |= sl_url_is_tls(cfg->listen[i]);
    }
    if (operator_tls != (cfg->operator_tls_ca != NULL)) {
        fprintf(stderr, operator_tls ? "salusd: a tls+tcp:// --operator-listen needs "
                                       "--operator-tls-ca FILE (the CA of operators' client "
                                       "certificates)\n"
                                     : "salusd: --operator-tls-ca given without a tls+tcp:// "
                                       "--operator-listen\n");
        return 2;
    }
    if (tls && (!cfg->tls_cert || !cfg->tls_key)) {
        fprintf(stderr, "salusd: tls+tcp:// listeners need --tls-cert FILE and --tls-key FILE\n");
        return 2;
    }
    if (tls && !cfg->tls_ca && !cfg->tls_allow_anonymous) {
        fprintf(stderr, "salusd: tls+tcp:// listeners need --tls-ca FILE (clients must present a "
                        "certificate it signed), or --tls-allow-anonymous to let any client in\n");
        return 2;
    }
    if (!tls && (cfg->tls_cert || cfg->tls_key || cfg->tls_ca || cfg->tls_allow_anonymous)) {
        fprintf(stderr, "salusd: --tls-cert/--tls-key/--tls-ca/--tls-allow-anonymous given "
                        "without a tls+tcp:// listener\n");
        return 2;
    }
    if (cfg->fault_file && strncmp(cfg->device, "sim:", 4) != 0) {
        fprintf(stderr, "salusd: --fault-inject needs a sim device (--device sim:PROFILE)\n");
        return 2;
    }
    return -1;
}

static int parse_args(int argc, char **argv, sl_config *cfg, const char **default_url)
{
    enum {
        OPT_LANE = 256,
        OPT_SPREAD,
        OPT_QUOTA,
        OPT_FRAMEWORK,
        OPT_NOINPLACE,
        OPT_OP_PART,
        OPT_GAP_MARGIN,
        OPT_PARTITIONS,
        OPT_STRICT,
        OPT_CONTEXTS,
        OPT_MAXMSG,
        OPT_IPCMODE,
        OPT_LOG,
        OPT_MAXSESSIONS,
        OPT_MAXTENSORS,
        OPT_MAXDECODING,
        OPT_METADATA,
        OPT_MAXMETADATA,
        OPT_TLSCERT,
        OPT_TLSKEY,
        OPT_TLSCA,
        OPT_TLSANON,
        OPT_IDLE,
        OPT_MAXCONNS,
        OPT_PLAINTCP,
        OPT_FAULT,
        OPT_NO_EXCLUSIVE,
        OPT_NO_STEPWISE,
        OPT_NO_GAPFILL,
        OPT_NO_CLASSES,
        OPT_STRICT_PARTS,
        OPT_OPLISTEN,
        OPT_OPCA,
        OPT_TENANT_LIMITS,
        OPT_USER_LIMITS,
        OPT_USER,
        OPT_GROUP,
        OPT_ALLOW_ROOT,
        OPT_SHM_SESSION,
        OPT_SHM_TOTAL,
        OPT_METRICS,
        OPT_CONFIG,
        OPT_PRINT_CONFIG
    };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"device", required_argument, NULL, 'd'},
        {"memory-limit", required_argument, NULL, 'm'},
        {"lane-size", required_argument, NULL, OPT_LANE},
        {"session-quota", required_argument, NULL, OPT_QUOTA},
        {"framework-per-lane", required_argument, NULL, OPT_FRAMEWORK},
        {"no-inplace", no_argument, NULL, OPT_NOINPLACE},
        {"op-part-us", required_argument, NULL, OPT_OP_PART},
        {"gap-margin", required_argument, NULL, OPT_GAP_MARGIN},
        {"partitions", required_argument, NULL, OPT_PARTITIONS},
        {"spread-limit", required_argument, NULL, OPT_SPREAD},
        {"policy", required_argument, NULL, 'p'},
        {"strict", no_argument, NULL, OPT_STRICT},
        {"contexts", required_argument, NULL, OPT_CONTEXTS},
        {"max-message", required_argument, NULL, OPT_MAXMSG},
        {"ipc-mode", required_argument, NULL, OPT_IPCMODE},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"max-sessions", required_argument, NULL, OPT_MAXSESSIONS},
        {"max-tensors-per-session", required_argument, NULL, OPT_MAXTENSORS},
        {"max-decoding", required_argument, NULL, OPT_MAXDECODING},
        {"session-metadata", required_argument, NULL, OPT_METADATA},
        {"max-metadata", required_argument, NULL, OPT_MAXMETADATA},
        {"tls-cert", required_argument, NULL, OPT_TLSCERT},
        {"tls-key", required_argument, NULL, OPT_TLSKEY},
        {"tls-ca", required_argument, NULL, OPT_TLSCA},
        {"tls-allow-anonymous", no_argument, NULL, OPT_TLSANON},
        {"idle-timeout", required_argument, NULL, OPT_IDLE},
        {"max-connections-per-user", required_argument, NULL, OPT_MAXCONNS},
        {"allow-plain-tcp", no_argument, NULL, OPT_PLAINTCP},
        {"fault-inject", required_argument, NULL, OPT_FAULT},
        {"no-exclusive-lanes", no_argument, NULL, OPT_NO_EXCLUSIVE},
        {"no-stepwise", no_argument, NULL, OPT_NO_STEPWISE},
        {"no-gap-fill", no_argument, NULL, OPT_NO_GAPFILL},
        {"no-stream-classes", no_argument, NULL, OPT_NO_CLASSES},
        {"strict-partitions", no_argument, NULL, OPT_STRICT_PARTS},
        {"operator-listen", required_argument, NULL, OPT_OPLISTEN},
        {"operator-tls-ca", required_argument, NULL, OPT_OPCA},
        {"tenant-limits", required_argument, NULL, OPT_TENANT_LIMITS},
        {"user-limits", required_argument, NULL, OPT_USER_LIMITS},
        {"user", required_argument, NULL, OPT_USER},
        {"group", required_argument, NULL, OPT_GROUP},
        {"allow-root", no_argument, NULL, OPT_ALLOW_ROOT},
        {"shm-session-bytes", required_argument, NULL, OPT_SHM_SESSION},
        {"shm-total-bytes", required_argument, NULL, OPT_SHM_TOTAL},
        {"metrics-listen", required_argument, NULL, OPT_METRICS},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"print-config", no_argument, NULL, OPT_PRINT_CONFIG},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
    };
    /* flags that are not settings: never keys of the configuration file */
    static const char *const not_keys[] = {"help", "version", "config", "print-config", NULL};
    bool print_config;
    if (sl_cfgfile_expand(argc, argv, opts, not_keys, &argc, &argv, &print_config) != 0)
        return 2;
    int c, li = -1;
    char *end, why[256];
    while ((c = getopt_long(argc, argv, "l:d:m:p:hV", opts, &li)) != -1) {
        sl_cfgfile_note(opts, c, li, optarg, optind);
        li = -1;
        switch (c) {
        case OPT_METRICS:
            cfg->metrics_listen = optarg;
            break;
        case OPT_CONFIG:
        case OPT_PRINT_CONFIG:
            break; /* taken out by sl_cfgfile_expand */
        case 'l':
        case OPT_OPLISTEN:
            if (cfg->n_listen == SL_MAX_LISTEN) {
                fprintf(stderr, "salusd: at most %d --listen and --operator-listen URLs\n",
                        SL_MAX_LISTEN);
                return 2;
            }
            cfg->listen_operator[cfg->n_listen] = c == OPT_OPLISTEN;
            cfg->listen[cfg->n_listen++] = optarg;
            break;
        case OPT_OPCA:
            cfg->operator_tls_ca = optarg;
            break;
        case OPT_TENANT_LIMITS:
            if (sl_limits_parse(optarg, &cfg->tenant_limits, why, sizeof why) != SL_OK) {
                fprintf(stderr, "salusd: bad --tenant-limits '%s': %s\n", optarg, why);
                return 2;
            }
            break;
        case OPT_USER_LIMITS:
            if (cfg->n_limit_rules == SL_MAX_LIMIT_RULES ||
                sl_limit_rule_parse(optarg, &cfg->limit_rules[cfg->n_limit_rules], why,
                                    sizeof why) != SL_OK) {
                fprintf(stderr, "salusd: bad --user-limits '%s': %s\n", optarg,
                        cfg->n_limit_rules == SL_MAX_LIMIT_RULES ? "too many" : why);
                return 2;
            }
            cfg->n_limit_rules++;
            break;
        case OPT_USER:
            cfg->run_user = optarg;
            break;
        case OPT_GROUP:
            cfg->run_group = optarg;
            break;
        case OPT_ALLOW_ROOT:
            cfg->allow_root = true;
            break;
        case 'd':
            cfg->device = optarg;
            break;
        case 'm':
            if (sl_parse_size(optarg, &cfg->memory_limit) || !cfg->memory_limit) {
                fprintf(stderr, "salusd: bad --memory-limit '%s' (e.g. 2G, 512M)\n", optarg);
                return 2;
            }
            break;
        case OPT_LANE:
            if (sl_parse_size(optarg, &cfg->lane_bytes) || !cfg->lane_bytes) {
                fprintf(stderr, "salusd: bad --lane-size '%s' (e.g. 256M)\n", optarg);
                return 2;
            }
            break;
        case OPT_SPREAD:
            if (sl_parse_size(optarg, &cfg->spread_limit)) {
                fprintf(stderr, "salusd: bad --spread-limit '%s' (e.g. 8G, or 0)\n", optarg);
                return 2;
            }
            cfg->spread_set = true;
            break;
        case OPT_QUOTA:
            if (sl_parse_size(optarg, &cfg->session_quota) || !cfg->session_quota) {
                fprintf(stderr, "salusd: bad --session-quota '%s' (e.g. 4G)\n", optarg);
                return 2;
            }
            break;
        case OPT_FRAMEWORK:
            if (sl_parse_size(optarg, &cfg->framework_per_lane)) {
                fprintf(stderr, "salusd: bad --framework-per-lane '%s' (e.g. 64M)\n", optarg);
                return 2;
            }
            cfg->framework_set = true;
            break;
        case OPT_NOINPLACE:
            cfg->no_inplace = true;
            break;
        case OPT_OP_PART: {
            long us = strtol(optarg, &end, 10);
            if (*end || us < 1 || us > 10 * 1000 * 1000) {
                fprintf(stderr, "salusd: --op-part-us takes 1..10000000\n");
                return 2;
            }
            cfg->op_part_ns = (uint64_t) us * 1000;
            break;
        }
        case OPT_PARTITIONS: {
            enum sl_parts_mode mode;
            unsigned units;
            if (sl_parts_parse(optarg, &mode, &units) != SL_OK) {
                fprintf(stderr, "salusd: --partitions takes off, demand, auto, auto:N or N\n");
                return 2;
            }
            cfg->partitions = optarg;
            break;
        }
        case OPT_GAP_MARGIN: {
            double pct = strtod(optarg, &end);
            if (end == optarg || *end || !(pct >= 0 && pct < 100)) {
                fprintf(stderr, "salusd: --gap-margin takes a percentage, 0 <= PCT < 100\n");
                return 2;
            }
            cfg->gap_margin = pct / 100;
            cfg->gap_margin_set = true;
            break;
        }
        case 'p':
            cfg->policy = optarg;
            break;
        case OPT_STRICT:
            cfg->strict = true;
            break;
        case OPT_CONTEXTS:
            cfg->contexts = (int) strtol(optarg, &end, 10);
            if (*end || cfg->contexts < 1 || cfg->contexts > 65536) {
                fprintf(stderr, "salusd: --contexts takes 1..65536\n");
                return 2;
            }
            break;
        case OPT_MAXMSG:
            if (sl_parse_size(optarg, &cfg->max_message) || cfg->max_message < 1024) {
                fprintf(stderr, "salusd: bad --max-message '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_MAXDECODING:
        case OPT_METADATA:
        case OPT_MAXMETADATA: {
            uint64_t *size = c == OPT_METADATA      ? &cfg->session_metadata
                             : c == OPT_MAXMETADATA ? &cfg->max_metadata
                                                    : &cfg->max_decoding;
            if (sl_parse_size(optarg, size) || !*size) {
                fprintf(stderr, "salusd: bad --%s '%s' (e.g. 256M)\n",
                        c == OPT_METADATA      ? "session-metadata"
                        : c == OPT_MAXMETADATA ? "max-metadata"
                                               : "max-decoding",
                        optarg);
                return 2;
            }
            break;
        }
        case OPT_IPCMODE:
            cfg->ipc_mode = (int) strtol(optarg, &end, 8);
            if (*end || cfg->ipc_mode < 0 || cfg->ipc_mode > 0777) {
                fprintf(stderr, "salusd: --ipc-mode takes an octal mode like 0600\n");
                return 2;
            }
            break;
        case OPT_SHM_SESSION:
        case OPT_SHM_TOTAL: {
            uint64_t *v = c == OPT_SHM_SESSION ? &cfg->shm_session_bytes : &cfg->shm_total_bytes;
            if (sl_parse_size(optarg, v) || !*v) {
                fprintf(stderr, "salusd: bad --%s '%s' (e.g. 512M)\n",
                        c == OPT_SHM_SESSION ? "shm-session-bytes" : "shm-total-bytes", optarg);
                return 2;
            }
            break;
        }
        case OPT_MAXSESSIONS:
        case OPT_MAXTENSORS: {
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > (1l << 30)) {
                fprintf(stderr, "salusd: --%s takes 1..2^30\n",
                        c == OPT_MAXSESSIONS ? "max-sessions" : "max-tensors-per-session");
                return 2;
            }
            *(c == OPT_MAXSESSIONS ? &cfg->max_sessions : &cfg->max_tensors_per_session) =
                (uint32_t) n;
            break;
        }
        case OPT_LOG:
            if (sl_log_set_level(optarg)) {
                fprintf(stderr, "salusd: --log-level takes error, warn, info or debug\n");
                return 2;
            }
            break;
        case OPT_TLSCERT:
            cfg->tls_cert = optarg;
            break;
        case OPT_TLSKEY:
            cfg->tls_key = optarg;
            break;
        case OPT_TLSCA:
            cfg->tls_ca = optarg;
            break;
        case OPT_TLSANON:
            cfg->tls_allow_anonymous = true;
            break;
        case OPT_IDLE: {
            long sec = strtol(optarg, &end, 10);
            if (*end || sec < 0 || sec > 86400) {
                fprintf(stderr, "salusd: --idle-timeout takes 0..86400 seconds\n");
                return 2;
            }
            cfg->idle_timeout_ms = (uint64_t) sec * 1000;
            break;
        }
        case OPT_MAXCONNS: {
            long n = strtol(optarg, &end, 10);
            if (*end || n < 0 || n > (1l << 20)) {
                fprintf(stderr, "salusd: --max-connections-per-user takes 0..2^20\n");
                return 2;
            }
            cfg->max_conns_per_user = (uint32_t) n;
            break;
        }
        case OPT_PLAINTCP:
            cfg->allow_plain_tcp = true;
            break;
        case OPT_FAULT:
            cfg->fault_file = optarg;
            break;
        case OPT_NO_EXCLUSIVE:
            cfg->no_exclusive_lanes = true;
            break;
        case OPT_NO_STEPWISE:
            cfg->no_stepwise = true;
            break;
        case OPT_NO_GAPFILL:
            cfg->no_gap_fill = true;
            break;
        case OPT_NO_CLASSES:
            cfg->no_stream_classes = true;
            break;
        case OPT_STRICT_PARTS:
            cfg->strict_partitions = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("salusd %s (protocol %d)\n", SL_SERVER_VERSION, SL_PROTOCOL_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "salusd: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!cfg->n_listen) {
        if (!default_url[0][0]) {
            fprintf(stderr,
                    "salusd: no private place for the default socket: XDG_RUNTIME_DIR is unset "
                    "and salusd does not run as root (whose default is /run/salus). Set "
                    "XDG_RUNTIME_DIR (a login session does), or pass --listen "
                    "ipc:///DIR/salus.sock with DIR a directory only you can write.\n");
            return 2;
        }
        cfg->listen[cfg->n_listen++] = default_url[0];
    }
    if (print_config) {
        sl_cfgfile_print(stdout, opts, not_keys);
        return 0;
    }
    if (!sl_sched_policy_find(cfg->policy)) {
        fprintf(stderr, "salusd: unknown policy '%s' (known: %s)\n", cfg->policy,
                sl_sched_policy_names());
        return 2;
    }
    return check_security(cfg);
}

/* SALUS_URL, else a socket in a directory of salusd's user's own: the
 * user's runtime directory, or /run/salus for root (a system service).
 * Empty when there is none: a shared directory such as /tmp would let
 * another user take the name first. */
static void default_listen_url(char *buf, size_t len)
{
    const char *env = getenv("SALUS_URL"), *dir = getenv("XDG_RUNTIME_DIR");
    if (env && *env)
        snprintf(buf, len, "%s", env);
    else if (dir && *dir)
        snprintf(buf, len, "ipc://%s/salus/salus.sock", dir);
    else if (geteuid() == 0)
        snprintf(buf, len, "ipc:///run/salus/salus.sock");
    else
        buf[0] = '\0';
}

/* Before start-up: who salusd will run as (*as, when it switches), or the
 * refusal to run as root unasked. Returns -1 to go on, else an exit
 * status. */
static int privileges_before(const sl_config *cfg, sl_run_as *as, bool *do_switch)
{
    char why[256];
    *do_switch = false;
    if (cfg->run_group && !cfg->run_user) {
        fprintf(stderr, "salusd: --group needs --user\n");
        return 2;
    }
    if (cfg->run_user && cfg->allow_root) {
        fprintf(stderr, "salusd: --user and --allow-root contradict each other\n");
        return 2;
    }
    if (cfg->run_user) {
        if (sl_priv_resolve(cfg->run_user, cfg->run_group, as, why, sizeof why) != SL_OK) {
            fprintf(stderr, "salusd: --user: %s\n", why);
            return 2;
        }
        if (geteuid() != 0) {
            if (as->uid == geteuid() && as->gid == getegid())
                return -1; /* already that user */
            fprintf(stderr, "salusd: --user %s needs salusd to be started as root\n",
                    cfg->run_user);
            return 2;
        }
        *do_switch = true;
        return -1;
    }
    if (geteuid() != 0)
        return -1;
    if (!cfg->allow_root) {
        fprintf(stderr,
                "salusd: refusing to run as root: salusd needs no root powers, and a flaw in "
                "it would hand them to any client. Start it with --user NAME (a dedicated "
                "user: it switches once its listeners are bound and its device is open), or "
                "say --allow-root to stay root with almost no capabilities.\n");
        return 2;
    }
    bool keep_bind = false;
    for (int i = 0; i < cfg->n_listen; i++)
        keep_bind |= sl_priv_url_needs_bind(cfg->listen[i]);
    if (sl_priv_drop_capabilities(keep_bind, why, sizeof why) != SL_OK) {
        fprintf(stderr, "salusd: --allow-root: %s\n", why);
        return 1;
    }
    sl_log_warn("srv.root",
                "running as root (--allow-root), without capabilities%s; prefer --user NAME",
                keep_bind ? " but CAP_NET_BIND_SERVICE" : "");
    return -1;
}

static volatile sig_atomic_t device_dead;
static pid_t main_tid;

/* Threads that libraries start before main blocks the signals (OpenBLAS's
 * pool, from its constructor) may still receive them, and their default
 * action would end salusd without a drain: such a thread passes the signal
 * on to the main thread, where it is blocked and sigwait takes it. */
static void forward_to_main(int sig)
{
    int saved = errno;
    (void) syscall(SYS_tgkill, getpid(), main_tid, sig);
    errno = saved;
}

/* An operator's Drain request: the same drain as SIGTERM. */
static void request_drain(void)
{
    kill(getpid(), SIGTERM);
}

/* The device is lost for good: drain and exit 3 (a supervisor restarts us). */
static void on_device_dead(void)
{
    device_dead = 1;
    sl_log_err("srv.dead", "the device cannot be recovered in this process: exiting (status 3)");
    kill(getpid(), SIGTERM);
}

int main(int argc, char **argv)
{
    char default_url[512];
    default_listen_url(default_url, sizeof default_url);
    const char *default_urls[1] = {default_url};
    sl_server srv = {.cfg = SL_CONFIG_DEFAULTS};
    int rc = parse_args(argc, argv, &srv.cfg, default_urls);
    if (rc == 2 && sl_cfgfile_origin())
        fprintf(stderr, "salusd: (that setting is at %s)\n", sl_cfgfile_origin());
    if (rc >= 0)
        return rc;
    srv.cfg.drain = request_drain;
    srv.cfg.device_dead = on_device_dead;
    sl_run_as run_as;
    bool do_switch;
    if ((rc = privileges_before(&srv.cfg, &run_as, &do_switch)) >= 0)
        return rc;
    /* the socket's folder may be the user's salusd becomes */
    srv.cfg.run_uid_set = do_switch;
    srv.cfg.run_uid = do_switch ? (uint32_t) run_as.uid : 0;

    /* every thread created from here on inherits the blocked set, so only
     * the main thread's sigwait sees these */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (srv.cfg.fault_file)
        sigaddset(&sigs, SIGUSR1); /* fault injection (fault.c) */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    main_tid = (pid_t) syscall(SYS_gettid);
    struct sigaction fwd = {.sa_handler = forward_to_main, .sa_flags = SA_RESTART};
    sigfillset(&fwd.sa_mask);
    (void) sigaction(SIGTERM, &fwd, NULL);
    (void) sigaction(SIGINT, &fwd, NULL);
    if (srv.cfg.fault_file)
        (void) sigaction(SIGUSR1, &fwd, NULL);

    if ((rc = sl_server_start(&srv)) != SL_OK) {
        sl_server_fini(&srv);
        return 1;
    }
    /* listeners bound and the device open: root's powers go for good */
    char why[256];
    if (do_switch && sl_priv_switch_user(&srv.cfg, &run_as, why, sizeof why) != SL_OK) {
        sl_log_err("srv.user", "cannot give up root: %s; exiting", why);
        _exit(1); /* half switched: nothing of this process may go on */
    }
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0 || sig == SIGUSR1) {
        if (sig == SIGUSR1)
            (void) sl_server_inject_faults(&srv);
        sig = 0;
    }
    sl_log_info("srv.drain", "%s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    sl_server_stop(&srv);
    return device_dead ? 3 : 0;
}
