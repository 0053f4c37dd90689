#include "sl_error.h"

static const struct {
    const char *name;
    const char *text;
} table[SL_E_COUNT] = {
    [SL_OK] = {"OK", "success"},
    [SL_EINVAL] = {"INVALID_ARGUMENT", "invalid argument"},
    [SL_ENOMEM] = {"HOST_OUT_OF_MEMORY", "host memory exhausted"},
    [SL_EEXHAUSTED] = {"RESOURCE_EXHAUSTED", "device memory quota or capacity exhausted"},
    [SL_ENOTFOUND] = {"NOT_FOUND", "no such session, tensor or graph"},
    [SL_EPERM] = {"PERMISSION_DENIED", "permission denied"},
    [SL_EPROTO] = {"PROTOCOL_ERROR", "protocol error"},
    [SL_EDEVICE] = {"DEVICE_ERROR", "device error"},
    [SL_ENODEV] = {"NO_DEVICE", "no usable device"},
    [SL_ESHUTDOWN] = {"SHUTTING_DOWN", "server is shutting down"},
    [SL_EUNSUPPORTED] = {"UNSUPPORTED", "not supported"},
    [SL_ETIMEDOUT] = {"TIMED_OUT", "timed out"},
    [SL_ECONN] = {"TRANSPORT_ERROR", "transport error"},
    [SL_EINTERNAL] = {"INTERNAL", "internal error"},
    [SL_ESESSIONLOST] = {"SESSION_LOST", "session lost"},
    [SL_EDEVICERESET] = {"DEVICE_RESET", "device was reset; re-upload persistent state"},
    [SL_EBUSY] = {"BUSY", "resource busy"},
};

const char *sl_strerror(int code)
{
    if (code < 0 || code >= SL_E_COUNT)
        return "unknown error";
    return table[code].text;
}

const char *sl_errname(int code)
{
    if (code < 0 || code >= SL_E_COUNT)
        return "UNKNOWN";
    return table[code].name;
}
