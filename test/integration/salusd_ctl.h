/* Helpers for tests that control salusd themselves (security, faults,
 * restarts): a server in a folder the test chooses, its log in a file, fault
 * injection, raw status. Built on harness.h's sl_test_server. */
#ifndef SL_TEST_SALUSD_CTL_H
#define SL_TEST_SALUSD_CTL_H

#include "harness.h"

#include <stdbool.h>
#include <stdint.h>

/* Makes a fresh temp folder (srv->dir, mode 0700) and the ipc:// URL in it. */
void sl_ctl_prepare(sl_test_server *srv);
/* Spawns salusd with exactly args (NULL-terminated), stdout and stderr going
 * to srv->dir/salusd.log. Returns at once. */
void sl_ctl_spawn(sl_test_server *srv, const char *const *args);
/* Waits up to timeout_s for a handshake on url; false if salusd exited
 * (srv->pid is then 0) or never answered. */
bool sl_ctl_wait_ready(sl_test_server *srv, const char *url, int timeout_s);
/* sl_ctl_spawn with "--listen srv->url --log-level info" before args, then
 * waits for it (fails the test if it does not come up in 10 s). */
void sl_ctl_start(sl_test_server *srv, const char *const *args);
/* Waits up to timeout_s for srv's salusd to exit (then SIGKILL); returns
 * its exit status, -1 if killed. */
int sl_ctl_wait(sl_test_server *srv, int timeout_s);
/* SIGTERM and waits up to 15 s; returns the exit status (-1: killed). Keeps
 * the folder. */
int sl_ctl_stop(sl_test_server *srv);
/* Removes srv->dir and everything in it. */
void sl_ctl_cleanup(sl_test_server *srv);
/* sl_ctl_prepare, then sl_ctl_start with args. */
void sl_ctl_launch(sl_test_server *srv, const char *const *args);
/* sl_ctl_stop, failing the test unless salusd drained and exited 0, then
 * sl_ctl_cleanup. */
void sl_ctl_finish(sl_test_server *srv);
/* Whether salusd's log contains text. */
bool sl_ctl_log_has(const sl_test_server *srv, const char *text);
/* Copies the last log line containing text into line; false if none. */
bool sl_ctl_log_last(const sl_test_server *srv, const char *text, char *line, size_t len);
/* Writes cmd into srv->dir/fault, sends SIGUSR1 and waits (up to 5 s) for
 * salusd to take the file away. salusd must run with
 * --fault-inject srv->dir/fault. */
void sl_ctl_fault(const sl_test_server *srv, const char *cmd);
/* The path of a file in srv->dir, written into buf. */
const char *sl_ctl_path(const sl_test_server *srv, const char *name, char *buf, size_t len);
/* Queued iterations of session id per the server's status (-1: no such
 * session). */
int sl_ctl_queued(salus_client *c, uint64_t session_id);
/* Whether session id's lane is busy (its iteration, or one of a session
 * sharing its lane, runs), per the server's status. */
bool sl_ctl_running(salus_client *c, uint64_t session_id);
/* Polls sl_ctl_running until true (fails the test after 5 s). */
void sl_ctl_wait_running(salus_client *c, uint64_t session_id);
/* A free TCP port on 127.0.0.1 (bound and released: a later bind may race). */
int sl_ctl_free_port(void);

#endif
