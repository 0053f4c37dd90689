/* What tests, benchmarks and the evaluation drivers share: monotonic clocks,
 * percentiles, private temporary folders, child processes, test certificates
 * (openssl), and a real salusd started in a folder of its own and stopped
 * with SIGTERM.
 *
 * Library code: nothing here exits the process or fails a test; fallible
 * functions return SL_OK or an SL_E* code (errno is left as the failed call
 * set it), and the caller decides (a cmocka harness fails the test, a
 * benchmark exits). Every child started here is killed when the process that
 * started it dies (PR_SET_PDEATHSIG), so a crashed test leaves no server
 * behind holding its output open.
 *
 * The salusd functions call libsalusclient (a handshake tells when salusd is
 * ready): programs that use them link salus_client_dep as well. */
#ifndef SL_TESTSUPPORT_H
#define SL_TESTSUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- clocks --------------------------------------------------------------- */

/* The monotonic clock in nanoseconds, milliseconds and seconds (one clock,
 * CLOCK_MONOTONIC, so that the three can be compared). */
uint64_t sl_ts_now_ns(void);
uint64_t sl_ts_now_ms(void);
double sl_ts_now_s(void);
/* CPU time this process has used, in nanoseconds (all its threads). */
uint64_t sl_ts_cpu_ns(void);
/* Sleeps ms milliseconds (a signal may cut it short). */
void sl_ts_sleep_ms(long ms);

/* ---- percentiles ---------------------------------------------------------- */

/* The p-th percentile (0..100) of v[0..n): the element of rank
 * round(p / 100 * (n - 1)) in sorted order. v is not changed (a copy is
 * sorted). 0 when n is 0 or the copy cannot be allocated. */
double sl_ts_percentile(const double *v, size_t n, double p);
/* sl_ts_percentile(v, n, 50): for an even n, the upper of the two middle
 * elements. */
double sl_ts_median(const double *v, size_t n);

/* ---- temporary folders ---------------------------------------------------- */

/* Makes a fresh folder "<base>/salus-<tag>-XXXXXX", mode 0700 (salusd
 * refuses a socket in a folder others can write), and writes its path into
 * dir (len bytes). base is $SL_TEST_RUNDIR when set (a test that needs a
 * parent only root can write, as /run), /tmp otherwise. Returns SL_OK,
 * SL_EINVAL when the path does not fit, or SL_EPERM when mkdtemp fails. */
int sl_ts_tempdir(const char *tag, char *dir, size_t len);
/* Removes the files directly in dir, then dir itself (what a salusd folder
 * holds: its socket, its log, fault files). Ignores what cannot be removed. */
void sl_ts_tempdir_remove(const char *dir);

/* ---- child processes ------------------------------------------------------ */

/* Forks and execs argv[0] with argv (NULL-terminated); stdout and stderr go
 * to the file log (appended, created 0644) when log is not NULL. Buffered
 * output is flushed first so that the child does not repeat it. Returns
 * SL_OK with *pid set, or SL_EINTERNAL when fork fails. A failed exec shows
 * as exit status 127. */
int sl_ts_spawn(const char *const *argv, const char *log, pid_t *pid);
/* Waits up to timeout_s (< 0: for ever) for pid to exit, polling every
 * 10 ms; past the timeout it is killed with SIGKILL. Reaps it in every case.
 * Returns its exit status, or -1 when it died by a signal or was killed. */
int sl_ts_wait(pid_t pid, double timeout_s);
/* Whether pid has exited (it is then reaped: call it only on a child that
 * nothing else waits for). */
bool sl_ts_exited(pid_t pid);

/* A free TCP port on 127.0.0.1, or -1 (bound and released: another
 * process may take it before the caller binds it). */
int sl_ts_free_port(void);

/* ---- certificates --------------------------------------------------------- */

/* Whether the openssl command line is on PATH (the functions below run it). */
bool sl_ts_have_openssl(void);
/* Makes a self-signed CA in the folder dir: <name>.key (EC P-256, mode
 * 0600) and <name>.crt, subject CN=cn, valid two days. Returns SL_OK,
 * SL_EINVAL when the command does not fit, or SL_EINTERNAL when openssl
 * failed (or is missing). */
int sl_ts_pki_ca(const char *dir, const char *name, const char *cn);
/* Makes <name>.key (EC P-256, mode 0600) and <name>.crt in dir, subject
 * CN=cn, signed by the CA <ca>.crt / <ca>.key there (sl_ts_pki_ca). With
 * san not NULL (a host address), the certificate names it as subjectAltName
 * (DNS and IP), which clients that verify a server's name need. Errors as
 * sl_ts_pki_ca. */
int sl_ts_pki_cert(const char *dir, const char *name, const char *cn, const char *ca,
                   const char *san);

/* ---- salusd --------------------------------------------------------------- */

typedef struct sl_ts_salusd {
    pid_t pid;     /* 0 while none runs */
    char dir[256]; /* its private folder (sl_ts_tempdir) */
    char url[320]; /* ipc://<dir>/salus.sock */
    char log[300]; /* <dir>/salusd.log when started logged, "" otherwise */
} sl_ts_salusd;

/* Zeroes s, makes its folder (tag as for sl_ts_tempdir) and the ipc:// URL
 * in it. Starts nothing. Errors as sl_ts_tempdir. */
int sl_ts_salusd_prepare(sl_ts_salusd *s, const char *tag);
/* Spawns the salusd at path with exactly args (NULL-terminated, may be
 * NULL; up to 60), plus --allow-root when running as root and args name
 * neither --user nor --allow-root (salusd refuses root unasked). With
 * logged, its output goes to s->log (<dir>/salusd.log); otherwise it
 * inherits ours. Returns at once; errors as sl_ts_spawn, SL_EINVAL for too
 * many args. */
int sl_ts_salusd_spawn(sl_ts_salusd *s, const char *path, const char *const *args, bool logged);
/* Waits up to timeout_s for a client handshake on url (s->url or another
 * listener of the same salusd). Returns SL_OK, SL_ESHUTDOWN when salusd
 * exited meanwhile (s->pid is then 0: it was reaped), or SL_ETIMEDOUT. */
int sl_ts_salusd_wait_ready(sl_ts_salusd *s, const char *url, double timeout_s);
/* sl_ts_salusd_prepare, then spawns salusd with "--listen <url>" before
 * args and waits up to 10 s for it. On failure nothing is left running and
 * the folder is removed, unless logged (the log stays to be read; s->dir
 * names it). Errors as the steps'. */
int sl_ts_salusd_start(sl_ts_salusd *s, const char *path, const char *tag, const char *const *args,
                       bool logged);
/* Sends SIGTERM and waits up to timeout_s (then SIGKILL). Returns salusd's
 * exit status, or -1 when it was killed or died by a signal (also when none
 * ran). Keeps the folder. */
int sl_ts_salusd_stop(sl_ts_salusd *s, double timeout_s);
/* Kills a salusd still running (SIGKILL, reaped) and removes the folder. */
void sl_ts_salusd_cleanup(sl_ts_salusd *s);
/* Whether s->log holds a line containing text; with last (len bytes), the
 * last such line is copied there. */
bool sl_ts_salusd_log_find(const sl_ts_salusd *s, const char *text, char *last, size_t len);

#endif
