/* What salusd keeps of root's powers. salusd needs none of them to serve:
 * binding a port below 1024 and opening the device are the only steps
 * that may need privileges, and both happen at start-up. So salusd started
 * as root either switches to a dedicated user once its listeners are bound
 * and its device is open (--user, --group), or, asked to stay root
 * (--allow-root), gives up every capability it does not need before it
 * starts a thread of its own; otherwise it refuses to start.
 *
 * After the switch, "salusd's own uid" in the operator rule (tenants.h) is
 * that user's. ipc:// socket files are handed to that user first, so that
 * salusd can still remove them at exit and replace them (transport.c's
 * watchdog), which also needs their folder to be writable by that user:
 * salusd warns when it is not. Clients using shared memory must then run as
 * that user (salusd, no longer root, cannot open other users' descriptors); others
 * quietly fall back to inline transfers. */
#ifndef SL_PRIVILEGES_H
#define SL_PRIVILEGES_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The user and group to run as, looked up from names or numbers. */
typedef struct sl_run_as {
    const char *user; /* as given */
    uid_t uid;
    gid_t gid;
} sl_run_as;

/* Looks up user (a name or a uid) and group (a name or a gid; NULL: the
 * user's primary group) into *out. Errors: SL_EINVAL with the reason in
 * why. May block on NSS (start-up only). */
int sl_priv_resolve(const char *user, const char *group, sl_run_as *out, char *why, size_t why_len);
/* Called as root before any thread of salusd's own starts, when salusd
 * stays root: drops every capability of this thread (and so of the threads
 * it starts) and of the bounding set but, when keep_bind (a listener on a
 * port below 1024), CAP_NET_BIND_SERVICE.
 * Errors: SL_EPERM with the reason in why. */
int sl_priv_drop_capabilities(bool keep_bind, char *why, size_t why_len);
/* Switches every thread of salusd to as->uid and as->gid for good (supplementary
 * groups: the user's), after handing cfg's ipc:// socket files to that
 * user, then checks that root cannot be regained and that no thread keeps
 * a capability. Errors: SL_EPERM with the reason in why (salusd must then
 * exit: it may be half switched). */
int sl_priv_switch_user(const sl_config *cfg, const sl_run_as *as, char *why, size_t why_len);
/* Whether url is a tcp (or tls, ws) listener on a port below 1024. */
bool sl_priv_url_needs_bind(const char *url);

#endif
