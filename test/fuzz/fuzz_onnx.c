/* libFuzzer target: bytes -> salus_onnx_check_buffer, the ONNX importer
 * without a server: protobuf decoding, the model's tensors and value
 * infos, constant folding and the mapping of every node onto the op
 * registry. Model files are untrusted input: any crash, leak, UB or
 * unbounded allocation is a bug. The verdict must be one of the documented
 * codes, with a reason whenever it is a refusal. */
#include <salus/salus.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[512];
    salus_onnx_options opts = {.batch = 2};
    int rc = salus_onnx_check_buffer(data, size, &opts, why, sizeof why);
    if (rc != SALUS_OK && rc != SALUS_EINVAL && rc != SALUS_EUNSUPPORTED && rc != SALUS_ENOMEM)
        abort();
    if (rc != SALUS_OK && rc != SALUS_ENOMEM && why[0] == '\0')
        abort();
    return 0;
}
