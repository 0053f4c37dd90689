/* Private to kernels/sim/: the state of an open sim device shared by
 * device.c (memory, open/close) and stream.c (streams, the real-time clock). */
#ifndef SL_SIM_DEV_H
#define SL_SIM_DEV_H

#include "sim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct sl_sim_region {
    struct sl_sim_region *next;
    void *base;
    size_t bytes;
};

/* Lock order: a stream's work-queue lock, then model_lock (a submission
 * reserves its launch while it holds its queue's lock), never the reverse;
 * mem_lock is taken alone. */
struct sl_sim_dev {
    const sl_sim_profile *profile;

    pthread_mutex_t mem_lock; /* guards regions, used and next_addr */
    bool mem_lock_ready;
    struct sl_sim_region *regions;
    uint64_t used;
    uint64_t next_addr; /* offset of the next region in the fake address range */

    pthread_mutex_t model_lock; /* guards res, the launch path and each stream's launch end */
    pthread_cond_t model_cv;    /* CLOCK_MONOTONIC; a job joined or left a resource */
    bool model_ready;
    sl_sim_psc res[SL_SIM_RES_COUNT]; /* capped by each op's occupancy (sim.h) */
    /* The launch path, one FIFO server for every stream of the device (the
     * driver and front end of one context): when the launches issued so
     * far are through, on sl_now_ns's clock. */
    uint64_t launch_free_ns;
    /* Bumped when the slowdown changes or the device is reset: launches
     * reserved before (at the old speed, perhaps far ahead) are reserved
     * again when their command runs, and the path is free from now. */
    uint64_t launch_epoch;
    /* "PROFILE,host-launch": submitting a command holds the submitting
     * thread until its launch ends, as a GPU driver's launch call does */
    bool host_launch;
    unsigned part_sms; /* SMs held by live partitions (spart.c) */

    /* Fault injection (sl_sim_fail_next_ops, sl_sim_set_slowdown); atomics
     * because every stream worker reads them. */
    atomic_uint fail_ops;    /* ops still to fail ... */
    atomic_int fail_code;    /* ... with this code */
    atomic_uint fail_graphs; /* graph instantiations still to fail (SL_FAULT_GRAPH) */
    atomic_bool lost;        /* an SL_EDEVICERESET fault: all work fails until reset */
    atomic_uint slowdown;    /* modeled times are multiplied by this (0, 1 = normal) */
    atomic_bool reset_fails; /* the next reset() fails */
};

/* The fault to apply to a command about to execute on d (an op when is_op):
 * SL_OK (run it) or the code to fail it with. Worker threads; never blocks. */
int sl_sim_take_fault(struct sl_sim_dev *d, bool is_op);

/* A compute partition (spart.c): SMs of the profile with a resource of its
 * own; sms and ps under the device's model_lock. */
struct sl_partition {
    struct sl_sim_dev *dev;
    unsigned sms;
    sl_sim_psc ps;
};

/* Partition functions of sl_sim_device_ops (spart.c, stream.c's bind);
 * contracts in device.h. */
int sl_sim_partition_caps(sl_device *dev, sl_partition_caps *caps);
int sl_sim_partition_create(sl_device *dev, unsigned units, sl_partition **out);
int sl_sim_partition_resize(sl_device *dev, sl_partition *p, unsigned units);
void sl_sim_partition_destroy(sl_device *dev, sl_partition *p);
unsigned sl_sim_partition_units(sl_device *dev, const sl_partition *p);
int sl_sim_stream_bind(sl_device *dev, sl_stream *s, sl_partition *p);

/* Stream functions of sl_sim_device_ops (stream.c); contracts in device.h. */
int sl_sim_stream_create(sl_device *dev, int priority, sl_stream **out);
void sl_sim_stream_destroy(sl_device *dev, sl_stream *s);
int sl_sim_memcpy_h2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
int sl_sim_memcpy_d2h(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
int sl_sim_memcpy_d2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
int sl_sim_launch(sl_device *dev, sl_stream *s, const sl_op_call *call);
int sl_sim_graph_begin(sl_device *dev, sl_stream *s);
int sl_sim_graph_end(sl_device *dev, sl_stream *s, sl_dev_graph **out, size_t *bytes, char *reason,
                     size_t len);
int sl_sim_graph_launch(sl_device *dev, sl_stream *s, sl_dev_graph *g);
void sl_sim_graph_destroy(sl_device *dev, sl_dev_graph *g);
int sl_sim_stream_set_workspace(sl_device *dev, sl_stream *s, void *ptr, size_t bytes);
int sl_sim_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg);
int sl_sim_synchronize(sl_device *dev, sl_stream *s);

#endif
