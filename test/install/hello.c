/* A program of a user's own, built against the installed salus with
 * `pkg-config --cflags --libs salus` (test_install.sh): it must start with
 * no LD_LIBRARY_PATH and no ldconfig, and use the library with no server
 * running (the graph builder's checks, a refused connection). */
#include <salus/salus.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hello URL (a URL no salusd listens on)\n");
        return 2;
    }
    salus_graph *g = salus_graph_new();
    if (!g)
        return 1;
    int64_t dims[] = {4, 3};
    salus_value x = salus_graph_input(g, SALUS_F32, 2, dims);
    salus_value y = salus_graph_op(g, "relu", 1, &x, 0, NULL, 0, NULL);
    int dtype = -1, ndim = 0;
    int64_t out[SALUS_MAX_DIMS];
    int rc = salus_graph_shape(g, y, &dtype, &ndim, out);
    salus_graph_free(g);
    if (rc != SALUS_OK || dtype != SALUS_F32 || ndim != 2 || out[0] != 4 || out[1] != 3) {
        fprintf(stderr, "relu of a 4x3 input: %s, dtype %d, %d dims\n", salus_strerror(rc), dtype,
                ndim);
        return 1;
    }
    salus_client *c = NULL;
    rc = salus_connect(argv[1], &c);
    if (rc == SALUS_OK) {
        fprintf(stderr, "connected to %s, where no salusd should listen\n", argv[1]);
        salus_disconnect(c);
        return 1;
    }
    printf("graph ok; connect %s: %s (%s)\n", argv[1], salus_strerror(rc), salus_last_error(NULL));
    return 0;
}
