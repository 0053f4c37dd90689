/* salusd: flags, start-up in steps that unwind on failure, and a main thread
 * that only waits for SIGTERM/SIGINT to drain and exit. */
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
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
            "      --max-message SIZE  largest request accepted (default: 1G)\n"
            "      --max-sessions N    sessions open at once, waiting ones included (default: %d)\n"
            "      --max-tensors-per-session N  tensors one session may hold, and as many\n"
            "                          graphs (default: %d)\n"
            "      --ipc-mode MODE     permissions of ipc:// socket files, octal (default: 0600:\n"
            "                          salusd's user only); over ipc:// a session also belongs\n"
            "                          to the uid that opened it\n"
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
            "      --fault-inject FILE sim devices, tests: on SIGUSR1 read fault commands from\n"
            "                          FILE (alloc [N] | sticky | fatal | slow N | clear), then\n"
            "                          delete it\n"
            "      --log-level LEVEL   error | warn | info | debug (default: info)\n"
            "  -h, --help              this text\n"
            "  -V, --version           print the version\n"
            "\n"
            "SIGTERM or SIGINT drains: running iterations finish, queued ones fail with\n"
            "SHUTTING_DOWN, then salusd exits 0. After a sticky device error salusd resets the\n"
            "device; sessions get DEVICE_RESET once and re-upload their tensors. If the device\n"
            "cannot be recovered in-process, salusd drains and exits 3 (restart it).\n",
            sl_sched_policy_names(), SL_DEFAULT_MAX_SESSIONS, SL_DEFAULT_MAX_TENSORS,
            SL_DEFAULT_IDLE_TIMEOUT_MS / 1000, SL_DEFAULT_MAX_CONNS_PER_USER);
}

/* Parses "123", "64K", "512M", "2G" (binary units). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return SL_EINVAL;
    uint64_t mult = 1;
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        mult = 1ull << 10;
        break;
    case 'm':
    case 'M':
        mult = 1ull << 20;
        break;
    case 'g':
    case 'G':
        mult = 1ull << 30;
        break;
    case 't':
    case 'T':
        mult = 1ull << 40;
        break;
    default:
        return SL_EINVAL;
    }
    if (*end && end[1] && !((end[1] == 'i' || end[1] == 'B') && (!end[2] || end[2] == 'B')))
        return SL_EINVAL;
    return sl_mul_ok(v, mult, out) ? SL_OK : SL_EINVAL;
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
        OPT_STRICT,
        OPT_CONTEXTS,
        OPT_MAXMSG,
        OPT_IPCMODE,
        OPT_LOG,
        OPT_MAXSESSIONS,
        OPT_MAXTENSORS,
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
        OPT_NO_CLASSES
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
        {"spread-limit", required_argument, NULL, OPT_SPREAD},
        {"policy", required_argument, NULL, 'p'},
        {"strict", no_argument, NULL, OPT_STRICT},
        {"contexts", required_argument, NULL, OPT_CONTEXTS},
        {"max-message", required_argument, NULL, OPT_MAXMSG},
        {"ipc-mode", required_argument, NULL, OPT_IPCMODE},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"max-sessions", required_argument, NULL, OPT_MAXSESSIONS},
        {"max-tensors-per-session", required_argument, NULL, OPT_MAXTENSORS},
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
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
    };
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "l:d:m:p:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            if (cfg->n_listen == SL_MAX_LISTEN) {
                fprintf(stderr, "salusd: at most %d --listen URLs\n", SL_MAX_LISTEN);
                return 2;
            }
            cfg->listen[cfg->n_listen++] = optarg;
            break;
        case 'd':
            cfg->device = optarg;
            break;
        case 'm':
            if (parse_size(optarg, &cfg->memory_limit) || !cfg->memory_limit) {
                fprintf(stderr, "salusd: bad --memory-limit '%s' (e.g. 2G, 512M)\n", optarg);
                return 2;
            }
            break;
        case OPT_LANE:
            if (parse_size(optarg, &cfg->lane_bytes) || !cfg->lane_bytes) {
                fprintf(stderr, "salusd: bad --lane-size '%s' (e.g. 256M)\n", optarg);
                return 2;
            }
            break;
        case OPT_SPREAD:
            if (parse_size(optarg, &cfg->spread_limit)) {
                fprintf(stderr, "salusd: bad --spread-limit '%s' (e.g. 8G, or 0)\n", optarg);
                return 2;
            }
            cfg->spread_set = true;
            break;
        case OPT_QUOTA:
            if (parse_size(optarg, &cfg->session_quota) || !cfg->session_quota) {
                fprintf(stderr, "salusd: bad --session-quota '%s' (e.g. 4G)\n", optarg);
                return 2;
            }
            break;
        case OPT_FRAMEWORK:
            if (parse_size(optarg, &cfg->framework_per_lane)) {
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
            if (parse_size(optarg, &cfg->max_message) || cfg->max_message < 1024) {
                fprintf(stderr, "salusd: bad --max-message '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_IPCMODE:
            cfg->ipc_mode = (int) strtol(optarg, &end, 8);
            if (*end || cfg->ipc_mode < 0 || cfg->ipc_mode > 0777) {
                fprintf(stderr, "salusd: --ipc-mode takes an octal mode like 0600\n");
                return 2;
            }
            break;
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
    if (rc >= 0)
        return rc;
    srv.cfg.device_dead = on_device_dead;

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
