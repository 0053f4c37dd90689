/* Guarded copies (guard.h): a thread-local jump buffer around the copy and
 * one process-wide handler that jumps back to it. */
#include "guard.h"
#include "sl_error.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The copy running on this thread: where to jump back to, and the bytes it
 * may fault on. */
struct guard {
    sigjmp_buf env;
    uintptr_t lo[2], hi[2];
};

static _Thread_local struct guard *volatile active;
static struct sigaction previous_bus, previous_segv;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

static bool inside(const struct guard *g, uintptr_t a)
{
    return (a >= g->lo[0] && a < g->hi[0]) || (a >= g->lo[1] && a < g->hi[1]);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    struct guard *g = active;
    if (g && si && si->si_code > 0 && inside(g, (uintptr_t) si->si_addr)) {
        active = NULL;
        siglongjmp(g->env, 1);
    }
    /* not ours: as if this handler had never been installed */
    const struct sigaction *prev = sig == SIGBUS ? &previous_bus : &previous_segv;
    if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction) {
        prev->sa_sigaction(sig, si, uc);
        return;
    }
    if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
        return;
    }
    /* the default action: re-raised, it is delivered (and kills) as soon as
     * this handler returns and unblocks the signal */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Installs on_fault for sig unless it is installed already, keeping what
 * was there to chain to. */
static int install(int sig, struct sigaction *previous)
{
    struct sigaction sa, now;
    if (sigaction(sig, NULL, &now) != 0)
        return SL_EINTERNAL;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_fault)
        return SL_OK;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, previous) == 0 ? SL_OK : SL_EINTERNAL;
}

int sl_guard_init(void)
{
    pthread_mutex_lock(&init_lock);
    int rc = install(SIGBUS, &previous_bus);
    if (rc == SL_OK)
        rc = install(SIGSEGV, &previous_segv);
    pthread_mutex_unlock(&init_lock);
    return rc;
}

/* Runs memmove (src non-NULL) or memset under the guard. */
static int guarded(void *dst, const void *src, size_t n)
{
    struct guard g = {
        .lo = {(uintptr_t) dst, (uintptr_t) src},
        .hi = {(uintptr_t) dst + n, src ? (uintptr_t) src + n : 0},
    };
    if (sigsetjmp(g.env, 1)) {
        active = NULL;
        return SL_EINVAL;
    }
    active = &g;
    atomic_signal_fence(memory_order_seq_cst);
    if (src)
        memmove(dst, src, n);
    else
        memset(dst, 0, n);
    atomic_signal_fence(memory_order_seq_cst);
    active = NULL;
    return SL_OK;
}

int sl_guarded_copy(void *dst, const void *src, size_t n)
{
    return n ? guarded(dst, src, n) : SL_OK;
}

int sl_guarded_zero(void *dst, size_t n)
{
    return n ? guarded(dst, NULL, n) : SL_OK;
}
