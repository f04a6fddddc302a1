/* adsm_impl/launch.h -- turning an ADSM_CALL into a backend launch: the object behind every
 * pointer argument (safe objects translated to their device addresses), the device ranges the
 * kernel may write and those it may only read.
 *
 * Normal thread context, runtime lock held (adsm_launch in api.h takes it); nothing here
 * allocates or calls a backend. */
#ifndef ADSM__LAUNCH_INCLUDED
#define ADSM__LAUNCH_INCLUDED

ADSM__PRIVATE void adsm__add_range(adsm__range *ranges, size_t *n, uintptr_t addr, size_t len, const char *param) {
    for (size_t i = 0; i < *n; i++)
        if (ranges[i].addr == addr) return;
    ranges[*n].addr = addr;
    ranges[*n].len = len;
    ranges[*n].param = param;
    (*n)++;
}

/* Finds the object behind a pointer argument, translating host addresses of safe objects into
 * device addresses in place. */
ADSM__PRIVATE adsm_result adsm__bind_pointer(adsm__runtime *rt, const adsm_kernel_desc *k, const adsm_param_desc *p,
                                             unsigned char *args, adsm__object **out) {
    void *value;
    memcpy(&value, args + p->offset, sizeof value);
    uintptr_t a = (uintptr_t)value;
    *out = NULL;
    if (!value) return ADSM_OK;
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
    if (o && o->safe) {
        void *dev = (void *)(o->dev + (a - o->host));
        memcpy(args + p->offset, &dev, sizeof dev);
    } else if (!o) {
        adsm__tree_node *n = adsm__tree_find(&rt->safe_dev, adsm__dev_in(rt, a)); /* already a device address */
        if (n) {
            o = ADSM__CONTAINER_OF(n, adsm__object, dev_node);
            void *dev = (void *)adsm__dev_in(rt, a); /* the backend translates it back */
            memcpy(args + p->offset, &dev, sizeof dev);
        }
    }
    if (!o)
        return adsm__fail(ADSM_ERROR_NOT_SHARED,
                          "kernel '%s': parameter '%s' (%s) is %p, which is not inside a shared object", k->name,
                          p->name, adsm__access_names[p->access], value);
    *out = o;
    return ADSM_OK;
}

ADSM__PRIVATE int adsm__in_list(adsm__object *const *list, size_t n, const adsm__object *o) {
    for (size_t i = 0; i < n; i++)
        if (list[i] == o) return 1;
    return 0;
}

/* Binds every pointer argument; writes gets the shared objects the kernel may write (with their
 * writer before this launch), used every shared object it names (directory.h moves them). */
ADSM__PRIVATE adsm_result adsm__prepare_launch(adsm__runtime *rt, adsm__launch *l, unsigned char *args,
                                               adsm__object **writes, uint64_t *writer_before, size_t *nwrites,
                                               adsm__object **used, size_t *nused) {
    const adsm_kernel_desc *k = l->kernel;
    for (unsigned i = 0; i < k->nparams; i++) {
        const adsm_param_desc *p = &k->params[i];
        adsm__object *o;
        if (!adsm__access_is_pointer(p->access)) continue;
        adsm_result r = adsm__bind_pointer(rt, k, p, args, &o);
        if (r != ADSM_OK) return r;
        if (!o) continue;
        if (!adsm__in_list(used, *nused, o)) used[(*nused)++] = o;
        if (adsm__access_writes(p->access)) {
            size_t before = l->nwritable;
            adsm__add_range(l->writable, &l->nwritable, o->dev, o->span, p->name);
            if (l->nwritable > before && !o->device_only) {
                writer_before[*nwrites] = o->writer_seq;
                writes[(*nwrites)++] = o;
            }
        } else {
            adsm__add_range(l->inputs, &l->ninputs, o->dev, o->span, p->name);
        }
    }
    return ADSM_OK;
}

ADSM__PRIVATE int adsm__any_busy(adsm__object *const *objects, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (objects[i]->busy_units) return 1;
    return 0;
}

#endif /* ADSM__LAUNCH_INCLUDED */
