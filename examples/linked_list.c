/* examples/linked_list.c -- a linked list built by the CPU in shared memory and walked by a
 * kernel. Shared objects have the same address on the CPU and on the device, so the `next`
 * pointers the CPU stores are valid inside the kernel as they are. Exits non-zero on a wrong sum.
 *
 *   cc -std=c11 -I. examples/linked_list.c -pthread -ldl && ./a.out */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <stdio.h>

/* The node layout, the same for the CPU and for the kernel's CUDA C. */
ADSM_SHARED(typedef struct node {
    struct node *next;
    long value;
} node;);

/* The kernel only gets the head; it reaches the other nodes through pointers. With one device,
 * adsm makes every CPU change visible to it at the call, so nodes not passed as arguments are
 * current. With several (ADSM_EMU_DEVICES=2), a pointer stored in an untyped object is followed
 * only into objects the kernel names: declare the node type with ADSM_TYPE and allocate the
 * nodes with ADSM_ALLOC for adsm to follow `next` (docs/usage.md, "Pointer structures").
 * One body for every backend: the CPU runs it on emu and host; on cuda NVRTC compiles the same
 * text at the first launch. */
ADSM_KERNEL_DEF(sum_list, (ADSM_OUT(long, total), ADSM_IN(node, head)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i != 0) continue; /* a list walk is sequential: thread 0 does it */
        long sum = 0;
        for (const node *n = head; n; n = n->next) sum += n->value;
        *total = sum;
    }
});

int main(void) {
    enum { COUNT = 1000 };
    node *nodes[COUNT];
    long expected = 0;
    node *head = NULL;
    for (int i = 0; i < COUNT; i++) { /* one shared object per node, linked back to front */
        nodes[i] = adsm_alloc(sizeof(node));
        if (!nodes[i]) {
            fprintf(stderr, "adsm_alloc: %s\n", adsm_last_error());
            return 1;
        }
        nodes[i]->value = i * 3 + 1;
        nodes[i]->next = head;
        head = nodes[i];
        expected += i * 3 + 1;
    }
    long *total = adsm_alloc(sizeof *total);
    adsm_result r = total ? ADSM_CALL(sum_list, adsm_grid_1d(1, 1), total, head) : adsm_last_result();
    if (r == ADSM_OK) r = adsm_sync();
    if (r != ADSM_OK) {
        fprintf(stderr, "sum_list failed: %s\n", adsm_last_error());
        return 1;
    }
    printf("linked_list: kernel sum %ld, expected %ld (%s backend)\n", *total, expected, adsm_backend_name());
    int ok = *total == expected;
    for (int i = 0; i < COUNT; i++) adsm_free(nodes[i]);
    adsm_free(total);
    adsm_shutdown();
    return ok ? 0 : 1;
}
