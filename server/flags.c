/* Parsing salusd's flags as the table (flags.h) says. */
#include "flags.h"

#include "config_file.h"
#include "sl_error.h"
#include "sl_text.h"
#include "transport.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(int) == sizeof(uint32_t), "SL_FLAG_INT stores int and uint32_t alike");

/* "1K", "64M": a minimum as people write sizes. */
static void size_text(uint64_t bytes, char *buf, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%llu", (unsigned long long) bytes);
    else
        snprintf(buf, len, "%llu%c", (unsigned long long) bytes, units[u]);
}

static int set_size(const sl_flag *f, sl_config *cfg, const char *arg, char *why, size_t len)
{
    uint64_t v;
    if (sl_parse_size(arg, &v) != SL_OK || v < f->min) {
        char min[32];
        size_text(f->min, min, sizeof min);
        if (f->min > 1)
            snprintf(why, len, "takes a size of at least %s, such as 512M or 2G", min);
        else
            snprintf(why, len, "takes a size%s, such as 512M or 2G", f->min ? " above 0" : "");
        return SL_EINVAL;
    }
    memcpy((char *) cfg + f->offset, &v, sizeof v);
    return SL_OK;
}

static int set_int(const sl_flag *f, sl_config *cfg, const char *arg, char *why, size_t len)
{
    int base = f->traits & SL_FLAG_OCTAL ? 8 : 10;
    char *end;
    long long n = strtoll(arg, &end, base);
    if (end == arg || *end || n < (long long) f->min || n > (long long) f->max) {
        if (base == 8)
            snprintf(why, len, "takes an octal mode from 0 to %#llo, such as 0600",
                     (unsigned long long) f->max);
        else
            snprintf(why, len, "takes an integer from %llu to %llu", (unsigned long long) f->min,
                     (unsigned long long) f->max);
        return SL_EINVAL;
    }
    uint64_t v = (uint64_t) n * f->scale;
    char *field = (char *) cfg + f->offset;
    if (f->width == sizeof(uint64_t)) {
        memcpy(field, &v, sizeof v);
    } else {
        uint32_t v32 = (uint32_t) v; /* the range keeps it below 2^31: an int alike */
        memcpy(field, &v32, sizeof v32);
    }
    return SL_OK;
}

int sl_flag_apply(const sl_flag *f, sl_config *cfg, const char *arg, char *why, size_t why_len)
{
    int rc = SL_OK;
    switch (f->kind) {
    case SL_FLAG_SWITCH:
        *(bool *) ((char *) cfg + f->offset) = true;
        break;
    case SL_FLAG_TEXT:
        memcpy((char *) cfg + f->offset, &arg, sizeof arg);
        break;
    case SL_FLAG_SIZE:
        rc = set_size(f, cfg, arg, why, why_len);
        break;
    case SL_FLAG_INT:
        rc = set_int(f, cfg, arg, why, why_len);
        break;
    case SL_FLAG_CUSTOM:
        rc = f->set(cfg, arg, why, why_len);
        break;
    case SL_FLAG_ACTION:
        snprintf(why, why_len, "is not a setting");
        rc = SL_EINVAL;
        break;
    }
    if (rc == SL_OK && f->given)
        *(bool *) ((char *) cfg + f->given - 1) = true;
    return rc;
}

const sl_flag *sl_flag_find(const char *name)
{
    for (int i = 0; i < sl_flags_count; i++)
        if (strcmp(sl_flags[i].name, name) == 0)
            return &sl_flags[i];
    return NULL;
}

bool sl_flag_is_key(const sl_flag *f)
{
    return f->kind != SL_FLAG_ACTION;
}

const char *sl_flags_default_listen(void)
{
    static char url[512];
    const char *env = getenv("SALUS_URL"), *dir = getenv("XDG_RUNTIME_DIR");
    if (env && *env)
        snprintf(url, sizeof url, "%s", env);
    else if (dir && *dir)
        snprintf(url, sizeof url, "ipc://%s/salus/salus.sock", dir);
    else if (geteuid() == 0)
        snprintf(url, sizeof url, "ipc:///run/salus/salus.sock");
    else
        url[0] = '\0';
    return url;
}

/* Listener and fault-injection flags that cannot work together: 0 or 2. */
static int check_combinations(const sl_config *cfg, FILE *err)
{
    bool tls = false, operator_tls = false;
    for (int i = 0; i < cfg->n_listen; i++) {
        const char *url = cfg->listen[i];
        if (sl_url_is_plain_network(url) && !cfg->allow_plain_tcp) {
            fprintf(err,
                    "salusd: refusing to listen on %s: plain tcp is unauthenticated and "
                    "unencrypted. Use tls+tcp:// with --tls-cert and --tls-key, or pass "
                    "--allow-plain-tcp for a trusted network.\n",
                    url);
            return 2;
        }
        tls |= sl_url_is_tls(url);
        if (!cfg->listen_operator[i])
            continue;
        if (!sl_url_is_tls(url) && !sl_url_is_plain_network(url)) {
            fprintf(err,
                    "salusd: --operator-listen %s: operator listeners are tls+tcp:// (or tcp:// "
                    "with --allow-plain-tcp); over ipc:// root and salusd's user are operators "
                    "already\n",
                    url);
            return 2;
        }
        operator_tls |= sl_url_is_tls(url);
    }
    if (operator_tls != (cfg->operator_tls_ca != NULL)) {
        fprintf(err, operator_tls ? "salusd: a tls+tcp:// --operator-listen needs "
                                    "--operator-tls-ca FILE (the CA of operators' client "
                                    "certificates)\n"
                                  : "salusd: --operator-tls-ca given without a tls+tcp:// "
                                    "--operator-listen\n");
        return 2;
    }
    bool metrics_tls = cfg->metrics_listen && strncmp(cfg->metrics_listen, "https://", 8) == 0;
    if ((tls || metrics_tls) && (!cfg->tls_cert || !cfg->tls_key)) {
        fprintf(err, "salusd: tls+tcp:// listeners and an https:// --metrics-listen need "
                     "--tls-cert FILE and --tls-key FILE\n");
        return 2;
    }
    if (metrics_tls != (cfg->metrics_tls_ca != NULL)) {
        fprintf(err, metrics_tls ? "salusd: an https:// --metrics-listen needs --metrics-tls-ca "
                                   "FILE (the CA of scrapers' client certificates)\n"
                                 : "salusd: --metrics-tls-ca given without an https:// "
                                   "--metrics-listen\n");
        return 2;
    }
    if (tls && !cfg->tls_ca && !cfg->tls_allow_anonymous) {
        fprintf(err, "salusd: tls+tcp:// listeners need --tls-ca FILE (clients must present a "
                     "certificate it signed), or --tls-allow-anonymous to let any client in\n");
        return 2;
    }
    if (!tls && (((cfg->tls_cert || cfg->tls_key) && !metrics_tls) || cfg->tls_ca ||
                 cfg->tls_allow_anonymous)) {
        fprintf(err, "salusd: --tls-cert/--tls-key/--tls-ca/--tls-allow-anonymous given "
                     "without a tls+tcp:// listener\n");
        return 2;
    }
    if (cfg->fault_file && strncmp(cfg->device, "sim:", 4) != 0 &&
        strncmp(cfg->device, "cuda", 4) != 0) {
        fprintf(err, "salusd: --fault-inject needs a sim device (--device sim:PROFILE), or cuda "
                     "for graph faults\n");
        return 2;
    }
    return 0;
}

/* getopt_long's view of the table: a flag's value is its short letter, or
 * 256 + its index. */
static void getopt_table(struct option *opts, char *shorts)
{
    int n = 0;
    shorts[n++] = ':'; /* a missing argument returns ':', not '?' */
    for (int i = 0; i < sl_flags_count; i++) {
        const sl_flag *f = &sl_flags[i];
        opts[i] = (struct option){f->name, f->arg ? required_argument : no_argument, NULL,
                                  f->short_opt ? f->short_opt : 256 + i};
        if (f->short_opt) {
            shorts[n++] = f->short_opt;
            if (f->arg)
                shorts[n++] = ':';
        }
    }
    opts[sl_flags_count] = (struct option){0};
    shorts[n] = '\0';
}

static const sl_flag *flag_of(int c)
{
    if (c >= 256 && c - 256 < sl_flags_count)
        return &sl_flags[c - 256];
    for (int i = 0; i < sl_flags_count; i++)
        if (sl_flags[i].short_opt && sl_flags[i].short_opt == c)
            return &sl_flags[i];
    return NULL;
}

/* getopt_long's complaint about argv[optind - 1]: 2. */
static int bad_option(int c, char **argv, FILE *err)
{
    const char *given = optind > 0 ? argv[optind - 1] : "?";
    const sl_flag *f = flag_of(optopt);
    if (c == ':' && f)
        fprintf(err, "salusd: --%s needs a value (%s)\n", f->name, f->arg);
    else if (c == ':')
        fprintf(err, "salusd: '%s' needs a value\n", given);
    else
        fprintf(err, "salusd: unknown flag '%s' (salusd --help lists them)\n", given);
    if (sl_cfgfile_origin_of(optind - 1))
        fprintf(err, "salusd: (that setting is at %s)\n", sl_cfgfile_origin_of(optind - 1));
    return 2;
}

int sl_flags_parse(int argc, char **argv, sl_config *cfg, FILE *err, enum sl_flags_action *action)
{
    struct option opts[SL_FLAGS_MAX + 1];
    char shorts[3 * SL_FLAGS_MAX + 2], why[256];
    getopt_table(opts, shorts);
    bool print;
    if (sl_cfgfile_expand(argc, argv, err, &argc, &argv, &print) != 0)
        return 2;
    *action = print ? SL_FLAGS_PRINT_CONFIG : SL_FLAGS_RUN;
    optind = 0; /* from the start, also when called before */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        const sl_flag *f = c == '?' || c == ':' ? NULL : flag_of(c);
        if (!f)
            return bad_option(c, argv, err);
        sl_cfgfile_note(f, optarg);
        if (f->kind == SL_FLAG_ACTION) {
            if (f->action == SL_FLAGS_CONFIG) {
                fprintf(err, "salusd: write --config in full, before or after the flags\n");
                return 2;
            }
            *action = f->action;
            if (f->action != SL_FLAGS_PRINT_CONFIG)
                return 0; /* --help and --version: the rest is not read */
            continue;
        }
        if (sl_flag_apply(f, cfg, optarg, why, sizeof why) != SL_OK) {
            const char *origin = sl_cfgfile_origin_of(optind - 1);
            fprintf(err, "salusd: %s%sbad --%s '%s': %s\n", origin ? origin : "",
                    origin ? ": " : "", f->name, optarg ? optarg : "", why);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(err, "salusd: unexpected argument '%s' (salusd takes only flags)\n", argv[optind]);
        return 2;
    }
    if (!cfg->n_listen) {
        const char *url = sl_flags_default_listen();
        if (!url[0]) {
            fprintf(err,
                    "salusd: no private place for the default socket: XDG_RUNTIME_DIR is unset "
                    "and salusd does not run as root (whose default is /run/salus). Set "
                    "XDG_RUNTIME_DIR (a login session does), or pass --listen "
                    "ipc:///DIR/salus.sock with DIR a directory only you can write.\n");
            return 2;
        }
        cfg->listen[cfg->n_listen++] = url;
    }
    return *action == SL_FLAGS_RUN ? check_combinations(cfg, err) : 0;
}
