#include "sl_testsupport.h"

#include "sl_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* A new EC P-256 key, as the openssl command line spells it. */
#define GENKEY "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out"

/* Runs a shell command (formatted) in dir, quiet; SL_OK when it exits 0. */
static int run_in(const char *dir, const char *fmt, ...)
{
    char body[1536], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t) n >= sizeof body)
        return SL_EINVAL;
    n = snprintf(cmd, sizeof cmd, "cd '%s' && ( %s ) >/dev/null 2>&1", dir, body);
    if (n < 0 || (size_t) n >= sizeof cmd)
        return SL_EINVAL;
    return system(cmd) == 0 ? SL_OK : SL_EINTERNAL;
}

bool sl_ts_have_openssl(void)
{
    return system("command -v openssl >/dev/null 2>&1") == 0;
}

int sl_ts_pki_ca(const char *dir, const char *name, const char *cn)
{
    return run_in(dir,
                  GENKEY " %s.key && chmod 600 %s.key && "
                         "openssl req -x509 -new -key %s.key -days 2 -subj /CN=%s -out %s.crt",
                  name, name, name, cn, name);
}

int sl_ts_pki_cert(const char *dir, const char *name, const char *cn, const char *ca,
                   const char *san)
{
    char ext[160] = "";
    if (san) {
        int rc = run_in(dir, "printf 'subjectAltName=DNS:%s,IP:%s\\n' > %s.ext", san, san, name);
        if (rc != SL_OK)
            return rc;
        snprintf(ext, sizeof ext, "-extfile %s.ext", name);
    }
    return run_in(dir,
                  GENKEY " %s.key && chmod 600 %s.key && "
                         "openssl req -new -key %s.key -subj /CN=%s -out %s.csr && "
                         "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -CAcreateserial "
                         "-days 2 %s -out %s.crt",
                  name, name, name, cn, name, name, ca, ca, ext, name);
}
