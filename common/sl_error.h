/* Error codes shared by every salus module.
 *
 * Fallible functions return int: SL_OK (0) or one of these codes. The numbers
 * are part of the wire protocol (proto/salus.proto enum Code) and of the public
 * client API (SALUS_E* in salus.h): never renumber, only append. */
#ifndef SL_ERROR_H
#define SL_ERROR_H

enum sl_err {
    SL_OK = 0,
    SL_EINVAL = 1,        /* malformed request or invalid argument */
    SL_ENOMEM = 2,        /* host memory exhausted */
    SL_EEXHAUSTED = 3,    /* device memory quota or capacity exhausted */
    SL_ENOTFOUND = 4,     /* unknown session, tensor or graph id */
    SL_EPERM = 5,         /* wrong token, or the object belongs to someone else */
    SL_EPROTO = 6,        /* undecodable message or protocol version mismatch */
    SL_EDEVICE = 7,       /* the device failed this request */
    SL_ENODEV = 8,        /* no usable device (no driver, bad index) */
    SL_ESHUTDOWN = 9,     /* the server is draining and takes no new work */
    SL_EUNSUPPORTED = 10, /* valid but not implemented by this build or backend */
    SL_ETIMEDOUT = 11,    /* a wait ran out */
    SL_ECONN = 12,        /* transport failure (client side) */
    SL_EINTERNAL = 13,    /* a bug: an invariant did not hold */
    SL_ESESSIONLOST = 14, /* the session no longer exists (server restart, reset) */
    SL_EDEVICERESET = 15, /* sticky device fault: device reset, re-upload state */
    SL_EBUSY = 16,        /* resource in use (e.g. freeing a tensor a graph uses) */
    SL_E_COUNT
};

/* Returns a static, human-readable description of code (never NULL). */
const char *sl_strerror(int code);

/* Returns the stable upper-case name of code ("INVALID_ARGUMENT", ...). */
const char *sl_errname(int code);

#endif
