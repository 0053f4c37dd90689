#include "served.h"

#include "sl_test.h"

#include <string.h>

void sl_served_init(sl_served *sv, const char *url)
{
    memset(sv, 0, sizeof *sv);
    sv->srv.cfg = (sl_config) SL_CONFIG_DEFAULTS;
    sv->srv.cfg.listen[sv->srv.cfg.n_listen++] = url;
    sv->srv.cfg.memory_limit = 256ull << 20;
}

void sl_served_run(sl_served *sv, void (*ready)(sl_served *sv))
{
    assert_sl_ok(sl_server_start(&sv->srv));
    if (ready)
        ready(sv);
    assert_sl_ok(salus_connect(sv->srv.cfg.listen[0], &sv->client));
}

void sl_served_start(sl_served *sv, const char *url, const char *policy, uint64_t op_part_ns,
                     void (*ready)(sl_served *sv))
{
    sl_served_init(sv, url);
    sv->srv.cfg.policy = policy;
    sv->srv.cfg.op_part_ns = op_part_ns;
    sl_served_run(sv, ready);
}

void sl_served_stop(sl_served *sv)
{
    salus_disconnect(sv->client);
    sl_server_stop(&sv->srv);
}
