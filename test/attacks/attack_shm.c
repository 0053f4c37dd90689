/* Hostile tenants against the shared-memory data plane. Each attack tries
 * both ways a client can try to hand salusd a segment: naming its
 * descriptor number in AttachShm (which salusd must refuse: reopening it
 * through /proc/<pid>/fd opens files on the client's behalf) and passing
 * the descriptor over the descriptor socket.
 *   hugetlb-memfd-sigbus  a huge-page memfd whose pages the tenant takes
 *                         away (hole punched, pool drained) before a run
 *                         reads it: the copy must fail that run, not
 *                         kill salusd with SIGBUS
 *   lease-freeze          a lease on the segment (an open of it blocks for
 *                         the lease-break time) and a flood of stalled
 *                         descriptor connections: the victim's iterations
 *                         must stay bounded
 *   opath-root-files      O_PATH descriptors (no access needed) of
 *                         /etc/shadow, a root-only file and a root-only
 *                         FIFO: refused, and nothing opened (inotify sees
 *                         no open)
 *   mapped-bytes-budget   sessions asking salusd to map far more than
 *                         their budget: what salusd maps stays within it
 *   shm-charge-cycle      sparse segments attached, run into and let go
 *                         of, one after another, the tenant keeping every
 *                         file: the pages salusd would fault in stay
 *                         charged to salusd's cgroup, segment after
 *                         segment
 */
#include "attack.h"
#include "client_internal.h"
#include "shm_stage.h"
#include "sl_test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define HUGE_PAGE (2ull << 20)

/* ---- the tenant's side ---------------------------------------------- */

/* AttachShm naming descriptor fd of this process by number (to be refused). */
static int attach_by_number(salus_session *s, int fd, uint64_t size)
{
    return sl_test_attach_shm(s, fd, 0, size);
}

/* Stages fd over the descriptor socket and attaches its ticket. */
static int attach_by_socket(const char *sock, salus_session *s, int fd, uint64_t size, char *msg,
                            size_t msg_len)
{
    uint64_t ticket = 0;
    int rc = sl_test_stage_shm(sock, s->id, s->token, fd, size, &ticket, msg, msg_len);
    return rc == SL_OK ? sl_test_attach_shm(s, 0, ticket, size) : rc;
}

/* Either way; SL_OK when salusd took the segment. */
static int attach_any(const char *sock, salus_session *s, int fd, uint64_t size)
{
    char msg[300];
    int old = attach_by_number(s, fd, size);
    int now = attach_by_socket(sock, s, fd, size, msg, sizeof msg);
    printf("  tenant: %llu-byte segment by number: %s; by socket: %s (%s)\n",
           (unsigned long long) size, salus_strerror(old), salus_strerror(now), msg);
    fflush(stdout);
    return old == SL_OK || now == SL_OK ? SL_OK : now;
}

static int tenant_session(const char *url, salus_client **c, salus_session **s)
{
    if (salus_connect(url, c) != SALUS_OK)
        return 100;
    if (salus_session_open(*c, NULL, s) != SALUS_OK) {
        salus_disconnect(*c);
        return 101;
    }
    return 0;
}

static void tenant_done(salus_client *c, salus_session *s)
{
    (void) salus_session_close(s);
    salus_disconnect(c);
}

/* What a tenant is told. It runs in a fresh process (this program run
 * again as another user, main's --tenant): NNG cannot be used in a forked
 * copy of a process that has used it. */
struct tenant_arg {
    const char *which; /* the tenant function, by name */
    const char *url;   /* ipc://... */
    const char *sock;  /* its path */
    int ready[2];      /* tenant -> test: "attacking" */
    int go[2];         /* test -> tenant: "go on" */
    const char *paths[4];
    uint64_t sizes[8];
    int n;
};

static char self_exe[4096];

/* sl_attack_as_tenant's fn: runs this program as the tenant arg names. */
static int exec_tenant(void *varg)
{
    struct tenant_arg *arg = varg;
    char fds[2][16], extra[8][32];
    const char *argv[24] = {self_exe, "--tenant", arg->which, arg->url, fds[0], fds[1]};
    snprintf(fds[0], sizeof fds[0], "%d", arg->ready[1]);
    snprintf(fds[1], sizeof fds[1], "%d", arg->go[0]);
    int n = 6;
    for (int i = 0; i < arg->n && i < 8; i++) {
        if (arg->paths[0]) {
            argv[n++] = arg->paths[i];
        } else {
            snprintf(extra[i], sizeof extra[i], "%llu", (unsigned long long) arg->sizes[i]);
            argv[n++] = extra[i];
        }
    }
    argv[n] = NULL;
    execv(self_exe, (char *const *) argv);
    return 127;
}

/* Starts the tenant of arg in the background; its pid. */
static pid_t start_tenant(struct tenant_arg *arg, int timeout_s)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(sl_attack_as_tenant(exec_tenant, arg, timeout_s) & 0xff);
    return pid;
}

static void tenant_pipes(struct tenant_arg *arg)
{
    assert_int_equal(pipe2(arg->ready, O_NONBLOCK), 0);
    assert_int_equal(pipe2(arg->go, O_NONBLOCK), 0);
}

static void close_pipes(struct tenant_arg *arg)
{
    for (int i = 0; i < 2; i++) {
        close(arg->ready[i]);
        close(arg->go[i]);
    }
}

static void signal_byte(int fd)
{
    (void) !write(fd, "x", 1);
}

static bool wait_byte(int fd, int timeout_s)
{
    struct timespec step = {0, 10 * 1000 * 1000};
    for (int i = 0; i < timeout_s * 100; i++) {
        char b;
        ssize_t n = read(fd, &b, 1);
        if (n == 1)
            return true;
        if (n == 0)
            return false;
        nanosleep(&step, NULL);
    }
    return false;
}

/* ---- hugetlb-memfd-sigbus ------------------------------------------- */

#define HUGE_ROWS (HUGE_PAGE / 4 / 2) /* feed and fetch: half a huge page each */

/* Attaches a huge-page memfd, takes its pages away, then runs on it. 0:
 * salusd refused the segment, or the run failed cleanly; 2: the run read
 * pages that were gone and succeeded (impossible); others: the attack
 * could not be set up. */
static int hugetlb_tenant(void *varg)
{
    struct tenant_arg *arg = varg;
    salus_client *c;
    salus_session *s;
    int rc = tenant_session(arg->url, &c, &s);
    if (rc)
        return rc;
    salus_graph *g = salus_graph_new();
    int64_t dims[] = {HUGE_ROWS};
    salus_value x = salus_graph_input(g, SALUS_F32, 1, dims);
    (void) salus_graph_op(g, "relu", 1, &x, 0, NULL, 0, NULL);
    if (salus_graph_error(g) || salus_graph_register(s, g, NULL) != SALUS_OK)
        return 102;
    const uint64_t size = 2 * HUGE_PAGE;
    int fd = memfd_create("hugetlb-attack", MFD_HUGETLB | MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t) size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        printf("  tenant: cannot make a sealed huge-page memfd: %s\n", strerror(errno));
        return 103;
    }
    float *seg = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (seg == MAP_FAILED)
        return 104;
    for (uint64_t i = 0; i < size / 4; i += 1024)
        seg[i] = 1.0f;
    if (attach_any(arg->sock, s, fd, size) != SL_OK) {
        salus_graph_free(g);
        tenant_done(c, s);
        return 0; /* refused: the attack ends here */
    }
    /* take the pages away: punch them out of the file, then drain the pool
     * so that no page can come back on salusd's next access */
    munmap(seg, size);
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t) size) != 0)
        return 105;
    int drain = memfd_create("hugetlb-drain", MFD_HUGETLB | MFD_CLOEXEC);
    uint64_t drained = 0;
    while (drain >= 0 && ftruncate(drain, (off_t) (drained + HUGE_PAGE)) == 0) {
        void *p = mmap(NULL, HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, drain,
                       (off_t) drained);
        if (p == MAP_FAILED)
            break;
        drained += HUGE_PAGE;
    }
    printf("  tenant: hole punched, %llu huge pages drained from the pool; running\n",
           (unsigned long long) (drained / HUGE_PAGE));
    fflush(stdout);
    Salus__ShmSlice feed = SALUS__SHM_SLICE__INIT, fetch = SALUS__SHM_SLICE__INIT;
    feed.length = HUGE_ROWS * 4;
    fetch.offset = HUGE_PAGE;
    fetch.length = HUGE_ROWS * 4;
    rc = sl_test_shm_run(s, salus_graph_id(g), feed, 1, fetch); /* value 1: relu(x) */
    printf("  tenant: the run on the emptied segment: %s (%s)\n", salus_strerror(rc),
           salus_last_error(c));
    salus_graph_free(g);
    tenant_done(c, s);
    return rc == SL_OK ? 2 : 0;
}

static long read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static bool write_long(const char *path, long v)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fprintf(f, "%ld\n", v) > 0;
    return fclose(f) == 0 && ok;
}

static long free_huge_pages(void)
{
    return sl_attack_proc_value("/proc/meminfo", "HugePages_Free:");
}

static void hugetlb_memfd_sigbus(void **state)
{
    (void) state;
    const char *name = "hugetlb-memfd-sigbus", *knob = "/proc/sys/vm/nr_hugepages";
    long before = read_long(knob);
    if (geteuid() != 0 || before < 0 || !write_long(knob, before + 8) || free_huge_pages() < 4) {
        if (before >= 0 && geteuid() == 0)
            (void) write_long(knob, before);
        sl_attack_skip(name, "NO HUGE PAGES: cannot reserve 4 huge pages (vm.nr_hugepages needs "
                             "root and free memory); the hugetlb case was NOT tested");
        return;
    }
    sl_attack a;
    sl_attack_begin(&a, name, NULL);
    struct tenant_arg arg = {.which = "hugetlb", .url = a.srv.url};
    tenant_pipes(&arg);
    int rc = sl_test_wait(start_tenant(&arg, 120), 130);
    close_pipes(&arg);
    (void) write_long(knob, before);
    if (rc == 2)
        snprintf(a.broken, sizeof a.broken, "a run read huge pages that were gone");
    char detail[160];
    snprintf(detail, sizeof detail, "tenant %s (exit %d)",
             rc == 0   ? "was refused or its run failed cleanly"
             : rc == 2 ? "read pages that were gone"
                       : "could not carry out the attack",
             rc);
    sl_attack_expect(&a, rc == 0, detail);
    bool held = sl_attack_end(&a, detail);
    assert_true(held);
    assert_int_equal(rc, 0);
}

/* ---- lease-freeze ----------------------------------------------------- */

/* More stalled connections than salusd serves at once (32, 4 a user). */
#define FLOOD 48

/* Holds a lease on its segment while handing it over both ways, then
 * floods the descriptor socket with connections that never send. 0: the
 * lease was held throughout, the attach by number was refused and the
 * descriptor socket staged the segment without touching the lease. */
static int lease_tenant(void *varg)
{
    struct tenant_arg *arg = varg;
    salus_client *c;
    salus_session *s;
    int rc = tenant_session(arg->url, &c, &s);
    if (rc)
        return rc;
    signal(SIGIO, SIG_IGN); /* a lease break notice must not end us */
    const uint64_t size = 1 << 20;
    int fd = memfd_create("lease-attack", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    /* a memfd takes a read lease (a write lease needs the file open
     * nowhere for writing); an open for writing by anyone else breaks it,
     * and waits for the lease-break time first */
    if (fd < 0 || ftruncate(fd, (off_t) size) != 0 || fallocate(fd, 0, 0, (off_t) size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 || fcntl(fd, F_SETLEASE, F_RDLCK) != 0) {
        printf("  tenant: cannot lease a memfd: %s\n", strerror(errno));
        return 110;
    }
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        uint64_t t0 = sl_ts_now_ms();
        int old = attach_by_number(s, fd, size);
        printf("  tenant: attach by number with a lease held: %s after %llu ms\n",
               salus_strerror(old), (unsigned long long) (sl_ts_now_ms() - t0));
        fflush(stdout);
        bad += old == SL_OK;
    }
    char msg[300];
    uint64_t t0 = sl_ts_now_ms();
    int now = attach_by_socket(arg->sock, s, fd, size, msg, sizeof msg);
    printf("  tenant: attach by socket with a lease held: %s after %llu ms (%s)\n",
           salus_strerror(now), (unsigned long long) (sl_ts_now_ms() - t0), msg);
    bad += now != SL_OK;
    bad += fcntl(fd, F_GETLEASE) != F_RDLCK; /* nobody broke it */
    /* stalled connections: more than salusd serves at once, none sending */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t) snprintf(sa.sun_path, sizeof sa.sun_path, "%s.fd", arg->sock) >=
        sizeof sa.sun_path)
        return 111;
    int conns[FLOOD], n = 0;
    for (; n < FLOOD; n++) {
        conns[n] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
        if (conns[n] < 0 || connect(conns[n], (struct sockaddr *) &sa, sizeof sa) != 0) {
            if (conns[n] >= 0)
                close(conns[n]);
            break;
        }
    }
    signal_byte(arg->ready[1]);    /* the test hands over as another user now */
    struct timespec hold = {3, 0}; /* past the per-connection deadline */
    nanosleep(&hold, NULL);
    /* the flood is dropped; a hand-over works again */
    t0 = sl_ts_now_ms();
    int after = attach_by_socket(arg->sock, s, fd, size, msg, sizeof msg);
    printf("  tenant: %d stalled connections held 3 s; a hand-over afterwards: %s after %llu ms\n",
           n, salus_strerror(after), (unsigned long long) (sl_ts_now_ms() - t0));
    bad += after != SL_OK;
    for (int i = 0; i < n; i++)
        close(conns[i]);
    (void) fcntl(fd, F_SETLEASE, F_UNLCK);
    close(fd);
    tenant_done(c, s);
    return bad ? 1 : 0;
}

static void lease_freeze(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, "lease-freeze", NULL);
    struct tenant_arg arg = {.which = "lease", .url = a.srv.url};
    tenant_pipes(&arg);
    pid_t pid = start_tenant(&arg, 200);
    /* while the tenant's stalled connections stand, another user's hand-over
     * (this process's, root) still goes through at once: the bound is per
     * user */
    char other[160] = "";
    int other_rc = SL_OK;
    uint64_t took = 0;
    if (wait_byte(arg.ready[0], 150) && sl_attack_cross_user()) {
        salus_client *c = sl_test_connect(&a.srv);
        salus_session *s;
        assert_sl_ok(salus_session_open(c, NULL, &s));
        int fd = memfd_create("other-user", MFD_ALLOW_SEALING | MFD_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, 1 << 20), 0);
        assert_int_equal(fallocate(fd, 0, 0, 1 << 20), 0);
        assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
        char msg[300];
        uint64_t ticket, t0 = sl_ts_now_ms();
        other_rc = sl_test_stage_shm(sl_attack_socket_path(&a), s->id, s->token, fd, 1 << 20,
                                     &ticket, msg, sizeof msg);
        took = sl_ts_now_ms() - t0;
        snprintf(other, sizeof other, "; root's hand-over during the flood: %s in %llu ms",
                 salus_strerror(other_rc), (unsigned long long) took);
        close(fd);
        assert_sl_ok(salus_session_close(s));
        salus_disconnect(c);
    }
    int rc = sl_test_wait(pid, 210);
    close_pipes(&arg);
    if (rc == 1)
        snprintf(a.broken, sizeof a.broken,
                 "the lease was broken, an attach by descriptor number was taken, or a hand-over "
                 "failed");
    else if (other_rc != SL_OK || took > a.victim_bound_ms)
        snprintf(a.broken, sizeof a.broken, "another user's hand-over was held up%s", other);
    char detail[320];
    snprintf(detail, sizeof detail,
             "lease held through 2 attaches by number and 2 by socket, %d "
             "stalled connections; tenant exit %d%s",
             FLOOD, rc, other);
    sl_attack_expect(&a, rc == 0, detail);
    bool held = sl_attack_end(&a, detail);
    assert_true(held);
    assert_int_equal(rc, 0);
}

/* ---- lingering-descriptor ---------------------------------------------- */

#define LINGER_S 5

/* Hands over a TCP socket that lingers LINGER_S seconds on unsent data,
 * letting go of its own copy at once, so that salusd's close of it is the
 * last and blocks; then hands over a good segment, which must go through
 * at once. 0: the socket was refused and the segment taken quickly. */
static int linger_tenant(void *varg)
{
    struct tenant_arg *arg = varg;
    salus_client *c;
    salus_session *s;
    int rc = tenant_session(arg->url, &c, &s);
    if (rc)
        return rc;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int small = 4096, lst = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
        tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    (void) setsockopt(lst, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    (void) setsockopt(tcp, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    if (lst < 0 || tcp < 0 || bind(lst, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        listen(lst, 1) != 0 || getsockname(lst, (struct sockaddr *) &sa, &len) != 0 ||
        connect(tcp, (struct sockaddr *) &sa, sizeof sa) != 0)
        return 130;
    /* the peer is never accepted and never reads: fill both buffers */
    (void) fcntl(tcp, F_SETFL, O_NONBLOCK);
    static char junk[1 << 16];
    while (send(tcp, junk, sizeof junk, MSG_NOSIGNAL) > 0)
        ;
    (void) fcntl(tcp, F_SETFL, 0);
    struct linger lg = {1, LINGER_S};
    (void) setsockopt(tcp, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    char msg[300];
    uint64_t ticket, t0 = sl_ts_now_ms();
    int bad = sl_test_stage_shm_ex(arg->sock, s->id, s->token, tcp, true, 4096, &ticket, msg,
                                   sizeof msg) != SL_EPERM;
    printf("  tenant: a lingering TCP socket, given away: refused in %llu ms (%s)\n",
           (unsigned long long) (sl_ts_now_ms() - t0), msg);
    int fd = memfd_create("after-linger", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0 || fallocate(fd, 0, 0, 1 << 20) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
        return 131;
    t0 = sl_ts_now_ms();
    int after = attach_by_socket(arg->sock, s, fd, 1 << 20, msg, sizeof msg);
    uint64_t took = sl_ts_now_ms() - t0;
    printf("  tenant: a segment right after it: %s in %llu ms\n", salus_strerror(after),
           (unsigned long long) took);
    bad += after != SL_OK || took > 1000;
    close(fd);
    close(lst);
    tenant_done(c, s);
    return bad ? 1 : 0;
}

static void lingering_descriptor(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, "lingering-descriptor", NULL);
    struct tenant_arg arg = {.which = "linger", .url = a.srv.url};
    tenant_pipes(&arg);
    int rc = sl_test_wait(start_tenant(&arg, 60), 70);
    close_pipes(&arg);
    if (rc != 0)
        snprintf(a.broken, sizeof a.broken,
                 "the hand-over after a lingering descriptor was held up or failed (tenant exit "
                 "%d)",
                 rc);
    char detail[128];
    snprintf(detail, sizeof detail, "a TCP socket lingering %d s on unsent data, given away",
             LINGER_S);
    sl_attack_expect(&a, rc == 0, detail);
    bool held = sl_attack_end(&a, detail);
    assert_true(held);
    assert_int_equal(rc, 0);
}

/* ---- opath-root-files ------------------------------------------------- */

/* Opens every path O_PATH (which needs no permission on the file), tells
 * the test, waits for its watches, then hands each over both ways. 0: all
 * refused. */
static int opath_tenant(void *varg)
{
    struct tenant_arg *arg = varg;
    salus_client *c;
    salus_session *s;
    int rc = tenant_session(arg->url, &c, &s);
    if (rc)
        return rc;
    int fds[4], accepted = 0;
    for (int i = 0; i < arg->n; i++) {
        fds[i] = open(arg->paths[i], O_PATH | O_CLOEXEC);
        if (fds[i] < 0) {
            printf("  tenant: cannot open %s O_PATH: %s\n", arg->paths[i], strerror(errno));
            return 120;
        }
    }
    signal_byte(arg->ready[1]);
    if (!wait_byte(arg->go[0], 30))
        return 121;
    for (int i = 0; i < arg->n; i++) {
        printf("  tenant: O_PATH %s:\n", arg->paths[i]);
        accepted += attach_any(arg->sock, s, fds[i], 4096) == SL_OK;
        close(fds[i]);
    }
    tenant_done(c, s);
    return accepted;
}

static void opath_root_files(void **state)
{
    (void) state;
    const char *name = "opath-root-files";
    if (!sl_attack_may_run(name, sl_attack_cross_user(),
                           "needs root: the attack is another user reaching root-only files"))
        return;
    char dir[] = "/tmp/salus-attack-XXXXXX", secret[64], fifo[64];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0755), 0);
    snprintf(secret, sizeof secret, "%s/secret", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    int f = open(secret, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(f >= 0);
    assert_int_equal(write(f, "root only\n", 10), 10);
    close(f);
    assert_int_equal(mkfifo(fifo, 0600), 0);

    sl_attack a;
    sl_attack_begin(&a, name, NULL);
    struct tenant_arg arg = {
        .which = "opath", .url = a.srv.url, .paths = {"/etc/shadow", secret, fifo}, .n = 3};
    tenant_pipes(&arg);
    /* watch once the tenant's own O_PATH opens are done, so that only
     * opens by salusd are seen */
    pid_t pid = start_tenant(&arg, 60);
    int watch = -1, opened = 0;
    char seen[256] = "";
    if (wait_byte(arg.ready[0], 30)) {
        watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        for (int i = 0; i < arg.n; i++)
            if (inotify_add_watch(watch, arg.paths[i], IN_OPEN | IN_ACCESS | IN_MODIFY) < 0)
                fail_msg("inotify on %s: %s", arg.paths[i], strerror(errno));
        signal_byte(arg.go[1]);
    }
    int rc = sl_test_wait(pid, 90);
    /* every open by anyone of the watched files: salusd's would be the one */
    char buf[4096] __attribute__((aligned(8)));
    ssize_t n;
    while (watch >= 0 && (n = read(watch, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *) p;
            if (e->mask & IN_OPEN) {
                opened++;
                snprintf(seen + strlen(seen), sizeof seen - strlen(seen), " %s",
                         arg.paths[e->wd - 1]);
            }
            p += sizeof *e + e->len;
        }
    }
    if (watch >= 0)
        close(watch);
    close_pipes(&arg);
    if (opened)
        snprintf(a.broken, sizeof a.broken, "salusd opened%s", seen);
    else if (rc != 0)
        snprintf(a.broken, sizeof a.broken, "the tenant failed or %d descriptors were taken", rc);
    char detail[400];
    snprintf(detail, sizeof detail,
             "3 O_PATH descriptors handed over both ways: %d accepted, %d "
             "opens seen%s",
             rc, opened, seen);
    sl_attack_expect(&a, rc == 0 && opened == 0, "a descriptor was taken or a file opened");
    bool held = sl_attack_end(&a, detail);
    unlink(secret);
    unlink(fifo);
    rmdir(dir);
    assert_true(held);
    assert_int_equal(rc, 0);
    assert_int_equal(opened, 0);
}

/* ---- mapped-bytes-budget ---------------------------------------------- */

#define BUDGET_SESSIONS 6

/* Opens sessions and hands each a sparse segment of each size in turn
 * until one is taken; then tells the test and waits while it measures. */
static int budget_tenant(void *varg)
{
    struct tenant_arg *arg = varg;
    salus_client *c;
    if (salus_connect(arg->url, &c) != SALUS_OK)
        return 100;
    salus_session *s[BUDGET_SESSIONS];
    int taken = 0;
    for (int i = 0; i < BUDGET_SESSIONS; i++) {
        if (salus_session_open(c, NULL, &s[i]) != SALUS_OK)
            return 101;
        for (int k = 0; k < arg->n; k++) {
            int fd = memfd_create("budget-attack", MFD_ALLOW_SEALING | MFD_CLOEXEC);
            if (fd < 0 || ftruncate(fd, (off_t) arg->sizes[k]) != 0 ||
                fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
                return 102;
            int rc = attach_any(arg->sock, s[i], fd, arg->sizes[k]);
            /* salusd refuses sparse segments once the budget allows them:
             * allocate this one (the tenant's memory, so only up to 256
             * MiB: this machine is shared) and offer it again */
            if (rc == SL_EINVAL && arg->sizes[k] <= (256ull << 20) &&
                fallocate(fd, 0, 0, (off_t) arg->sizes[k]) == 0)
                rc = attach_any(arg->sock, s[i], fd, arg->sizes[k]);
            close(fd);
            if (rc == SL_OK) {
                taken++;
                break;
            }
        }
    }
    signal_byte(arg->ready[1]);
    (void) wait_byte(arg->go[0], 60);
    for (int i = 0; i < BUDGET_SESSIONS; i++)
        (void) salus_session_close(s[i]);
    salus_disconnect(c);
    return taken;
}

/* Bytes of memfd mappings in process pid. */
static uint64_t memfd_mapped(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int) pid);
    FILE *f = fopen(path, "r");
    uint64_t total = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (strstr(line, "/memfd:") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            total += hi - lo;
    }
    if (f)
        fclose(f);
    return total;
}

/* One budget attack: salusd with args (in a memory cgroup of cgroup_limit
 * bytes unless 0), a tenant offering sizes; what salusd maps must stay
 * within limit. */
static void budget_case(const char *name, const char *const *args, uint64_t cgroup_limit,
                        const uint64_t *sizes, int n, uint64_t limit, int want_taken)
{
    /* its sessions declare no device memory, so under the default quota
     * each would take all the tenant may have: what is tested here is the
     * shared-memory budget, so the tenant has no device quota */
    const char *all[16] = {"--tenant-limits", "memory=0"};
    for (int i = 0; args && args[i] && i < 13; i++)
        all[2 + i] = args[i];
    sl_attack a;
    sl_attack_cgroup cg;
    if (cgroup_limit)
        sl_attack_cgroup_enter(&cg, cgroup_limit);
    sl_attack_begin(&a, name, all);
    if (cgroup_limit)
        sl_attack_cgroup_started(&cg);
    struct tenant_arg arg = {.which = "budget", .url = a.srv.url, .n = n};
    memcpy(arg.sizes, sizes, (size_t) n * sizeof *sizes);
    tenant_pipes(&arg);
    pid_t pid = start_tenant(&arg, 120);
    uint64_t mapped = 0;
    if (wait_byte(arg.ready[0], 100))
        mapped = memfd_mapped(a.srv.pid);
    signal_byte(arg.go[1]);
    int taken = sl_test_wait(pid, 130);
    close_pipes(&arg);
    if (mapped > limit)
        snprintf(a.broken, sizeof a.broken, "salusd mapped %llu MiB, more than the budget",
                 (unsigned long long) (mapped >> 20));
    char detail[256];
    snprintf(detail, sizeof detail,
             "%d sessions offered up to %llu MiB each: %d segments taken, "
             "salusd mapped %llu MiB (budget %llu MiB)",
             BUDGET_SESSIONS, (unsigned long long) (sizes[0] >> 20), taken,
             (unsigned long long) (mapped >> 20), (unsigned long long) (limit >> 20));
    sl_attack_expect(&a, mapped <= limit, "salusd mapped more than its budget");
    sl_attack_expect(&a, want_taken < 0 || taken == want_taken,
                     "not the configured number of segments taken");
    bool held = sl_attack_end(&a, detail);
    if (cgroup_limit)
        (void) sl_attack_cgroup_remove(&cg);
    assert_true(held);
    assert_true(mapped <= limit);
    if (want_taken >= 0)
        assert_int_equal(taken, want_taken);
}

static void mapped_bytes_budget_default(void **state)
{
    (void) state;
    /* sparse segments: mapping them costs the tenant nothing */
    const uint64_t sizes[] = {4ull << 30, 1ull << 30};
    budget_case("mapped-bytes-budget", NULL, 0, sizes, 2, 8ull << 30, -1);
}

static void mapped_bytes_budget_cgroup(void **state)
{
    (void) state;
    /* pages salusd faults in are charged to its cgroup: in a 1 GiB one it
     * maps at most a quarter, whatever the host's RAM */
    const uint64_t sizes[] = {1ull << 30, 200ull << 20, 64ull << 20};
    budget_case("mapped-bytes-budget-cgroup", NULL, 1ull << 30, sizes, 3, 256ull << 20, -1);
}

static void mapped_bytes_budget_configured(void **state)
{
    (void) state;
    const char *const args[] = {"--shm-session-bytes", "64M", "--shm-total-bytes", "160M", NULL};
    const uint64_t sizes[] = {1ull << 30, 65ull << 20, 64ull << 20};
    /* two sessions get 64 MiB each; a third would pass the total */
    budget_case("mapped-bytes-budget-configured", args, 0, sizes, 3, 160ull << 20, 2);
}

/* ---- shm-charge-cycle ------------------------------------------------- */

#define CYCLES 12
#define CYCLE_SEG (64ull << 20)
#define CYCLE_ROWS (CYCLE_SEG / 4 / 2) /* feed and fetch: half the segment each */

/* Bytes of fd's file that are allocated. */
static uint64_t allocated(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t) st.st_blocks * 512 : 0;
}

/* A sparse memfd of size bytes, sealed against shrinking; -1 if none. */
static int sparse_memfd(uint64_t size)
{
    int fd = memfd_create("charge-cycle", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (fd >= 0 &&
        (ftruncate(fd, (off_t) size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* CYCLES times: a sparse segment handed over, a run reading the first half
 * and writing the second, the segment replaced by the next; every file is
 * kept, so whatever salusd faulted into them stays charged to salusd. Then
 * an allocated segment whose fetch half is punched out after the
 * hand-over. Tells the test (ready) and waits while it measures. 0:
 * salusd faulted in no page of the tenant's files; 1: it did (printed);
 * others: the attack could not be set up. */
static int charge_tenant(void *varg)
{
    struct tenant_arg *arg = varg;
    salus_client *c;
    salus_session *s;
    int rc = tenant_session(arg->url, &c, &s);
    if (rc)
        return rc;
    salus_graph *g = salus_graph_new();
    int64_t dims[] = {CYCLE_ROWS};
    salus_value x = salus_graph_input(g, SALUS_F32, 1, dims);
    (void) salus_graph_op(g, "relu", 1, &x, 0, NULL, 0, NULL);
    if (salus_graph_error(g) || salus_graph_register(s, g, NULL) != SALUS_OK)
        return 102;
    Salus__ShmSlice feed = SALUS__SHM_SLICE__INIT, fetch = SALUS__SHM_SLICE__INIT;
    feed.length = CYCLE_ROWS * 4;
    fetch.offset = CYCLE_ROWS * 4;
    fetch.length = CYCLE_ROWS * 4;
    int kept[CYCLES], taken = 0, ran = 0;
    uint64_t charged = 0;
    for (int i = 0; i < CYCLES; i++) {
        if ((kept[i] = sparse_memfd(CYCLE_SEG)) < 0)
            return 103;
        char msg[300] = "";
        if (attach_by_socket(arg->sock, s, kept[i], CYCLE_SEG, msg, sizeof msg) != SL_OK)
            continue;
        taken++;
        ran += sl_test_shm_run(s, salus_graph_id(g), feed, 1, fetch) == SL_OK;
    }
    /* salusd let go of all but the last; what is allocated in the files
     * now, the tenant never touched: salusd faulted it in */
    for (int i = 0; i < CYCLES; i++)
        charged += allocated(kept[i]);
    printf("  tenant: %d sparse %llu MiB segments: %d taken, %d runs; salusd faulted %llu MiB into "
           "them, kept by the tenant\n",
           CYCLES, (unsigned long long) (CYCLE_SEG >> 20), taken, ran,
           (unsigned long long) (charged >> 20));
    /* holes punched after the hand-over: the run must be refused before
     * salusd copies into them */
    int fd = sparse_memfd(CYCLE_SEG), refused = -1;
    uint64_t refilled = 0;
    char msg[300] = "";
    if (fd >= 0 && fallocate(fd, 0, 0, (off_t) CYCLE_SEG) == 0 &&
        attach_by_socket(arg->sock, s, fd, CYCLE_SEG, msg, sizeof msg) == SL_OK &&
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) fetch.offset,
                  (off_t) fetch.length) == 0) {
        refused = sl_test_shm_run(s, salus_graph_id(g), feed, 1, fetch) != SL_OK;
        refilled = allocated(fd) - (CYCLE_SEG - fetch.length);
        printf("  tenant: an allocated segment with its fetch half punched out after the "
               "hand-over: run %s (%s), %llu MiB faulted back in\n",
               refused ? "refused" : "ran", salus_last_error(c),
               (unsigned long long) (refilled >> 20));
    } else {
        printf("  tenant: an allocated segment was not taken: %s\n", msg);
    }
    fflush(stdout);
    signal_byte(arg->ready[1]);
    (void) wait_byte(arg->go[0], 60);
    for (int i = 0; i < CYCLES; i++)
        close(kept[i]);
    if (fd >= 0)
        close(fd);
    salus_graph_free(g);
    tenant_done(c, s);
    if (refused < 0)
        return 104; /* a good segment must still be taken */
    return charged || refilled || !refused ? 1 : 0;
}

/* The shmem charged to the memory cgroup in dir (v2 or v1 memory.stat); 0
 * when there is none to read. */
static uint64_t cgroup_shmem(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    long v = sl_attack_proc_value(path, "shmem");
    return v > 0 ? (uint64_t) v : 0;
}

static void shm_charge_cycle(void **state)
{
    (void) state;
    const char *args[] = {"--tenant-limits", "memory=0", NULL};
    sl_attack a;
    sl_attack_cgroup cg;
    /* in 1 GiB: the pages the old salusd faulted into CYCLES segments
     * (768 MiB) come close to it, while the mapped-bytes budget (a quarter)
     * held at every moment */
    sl_attack_cgroup_enter(&cg, 1ull << 30);
    sl_attack_begin(&a, "shm-charge-cycle", args);
    sl_attack_cgroup_started(&cg);
    struct tenant_arg arg = {.which = "charge", .url = a.srv.url};
    tenant_pipes(&arg);
    pid_t pid = start_tenant(&arg, 200);
    uint64_t shmem = 0;
    bool ready = wait_byte(arg.ready[0], 180);
    if (ready && cg.real)
        shmem = cgroup_shmem(cg.dir);
    signal_byte(arg.go[1]);
    int rc = sl_test_wait(pid, 210);
    close_pipes(&arg);
    if (rc == 1)
        snprintf(a.broken, sizeof a.broken,
                 "salusd faulted pages into segments the tenant keeps (charged to salusd)");
    char detail[256];
    snprintf(detail, sizeof detail,
             "%d sparse %llu MiB segments run into and let go of, every file kept: tenant exit "
             "%d; shmem charged to salusd's cgroup (%s) %llu MiB",
             CYCLES, (unsigned long long) (CYCLE_SEG >> 20), rc, cg.version,
             (unsigned long long) (shmem >> 20));
    sl_attack_expect(&a, rc == 0, detail);
    bool held = sl_attack_end(&a, detail);
    int ooms = sl_attack_cgroup_remove(&cg);
    if (ooms)
        printf("  salusd's cgroup saw %d OOM kills\n", ooms);
    assert_true(held);
    assert_int_equal(rc, 0);
    assert_int_equal(ooms, 0);
}

/* The tenant side of this program: --tenant WHICH URL READY_FD GO_FD
 * [PATHS or SIZES...]. */
static int tenant_main(int argc, char **argv)
{
    struct tenant_arg arg = {.which = argv[2], .url = argv[3]};
    arg.sock = arg.url + strlen("ipc://");
    arg.ready[1] = atoi(argv[4]);
    arg.go[0] = atoi(argv[5]);
    static const struct {
        const char *name;
        int (*fn)(void *);
        bool paths;
    } tenants[] = {{"hugetlb", hugetlb_tenant, false}, {"lease", lease_tenant, false},
                   {"linger", linger_tenant, false},   {"opath", opath_tenant, true},
                   {"budget", budget_tenant, false},   {"charge", charge_tenant, false}};
    for (size_t t = 0; t < sizeof tenants / sizeof tenants[0]; t++) {
        if (strcmp(tenants[t].name, arg.which) != 0)
            continue;
        for (int i = 6; i < argc && arg.n < 4; i++, arg.n++) {
            if (tenants[t].paths)
                arg.paths[arg.n] = argv[i];
            else
                arg.sizes[arg.n] = strtoull(argv[i], NULL, 10);
        }
        return tenants[t].fn(&arg);
    }
    return 126;
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "--tenant") == 0)
        return tenant_main(argc, argv);
    ssize_t len = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (len <= 0)
        return 1;
    self_exe[len] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hugetlb_memfd_sigbus),
        cmocka_unit_test(lease_freeze),
        cmocka_unit_test(lingering_descriptor),
        cmocka_unit_test(opath_root_files),
        cmocka_unit_test(mapped_bytes_budget_default),
        cmocka_unit_test(mapped_bytes_budget_configured),
        cmocka_unit_test(mapped_bytes_budget_cgroup),
        cmocka_unit_test(shm_charge_cycle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
