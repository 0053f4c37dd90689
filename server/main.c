/* salusd: flags (flags.h), start-up in steps that unwind on failure, and a main thread
 * that only waits for SIGTERM/SIGINT to drain and exit. */
#include "config_file.h"
#include "flags.h"
#include "privileges.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The command line and --config: -1 to start serving, else the exit
 * status. */
static int parse_args(int argc, char **argv, sl_config *cfg)
{
    enum sl_flags_action action;
    if (sl_flags_parse(argc, argv, cfg, stderr, &action) != 0)
        return 2;
    switch (action) {
    case SL_FLAGS_HELP:
        sl_flags_help(stdout);
        return 0;
    case SL_FLAGS_VERSION:
        printf("salusd %s (protocol %d)\n", SL_SERVER_VERSION, SL_PROTOCOL_VERSION);
        return 0;
    case SL_FLAGS_PRINT_CONFIG:
        sl_cfgfile_print(stdout);
        return 0;
    default:
        return -1;
    }
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
    sl_server srv = {.cfg = SL_CONFIG_DEFAULTS};
    int rc = parse_args(argc, argv, &srv.cfg);
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
