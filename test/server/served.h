/* An embedded server for the test/server tests: salusd's server library on
 * an inproc:// address in this process (cpu device, 256 MiB), and one
 * client connected to it. */
#ifndef SL_TEST_SERVED_H
#define SL_TEST_SERVED_H

#include "server.h"

#include <salus/salus.h>

typedef struct sl_served {
    sl_server srv;
    salus_client *client;
} sl_served;

/* Zeroes sv and gives its configuration salusd's defaults, listening on
 * url, 256 MiB; the caller may change sv->srv.cfg before sl_served_run. */
void sl_served_init(sl_served *sv, const char *url);
/* Starts the server configured in sv->srv.cfg, calls ready(sv) when given,
 * then connects sv->client. Fails the test on error. */
void sl_served_run(sl_served *sv, void (*ready)(sl_served *sv));
/* Starts a server on url under policy (op_part_ns: sl_config.op_part_ns,
 * 0 for none); calls ready(sv), when given, before any client connects
 * (to wrap the device's ops), then connects sv->client. Fails the test on
 * error. */
void sl_served_start(sl_served *sv, const char *url, const char *policy, uint64_t op_part_ns,
                     void (*ready)(sl_served *sv));
/* Disconnects the client and stops the server. */
void sl_served_stop(sl_served *sv);

#endif
