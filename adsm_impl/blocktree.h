/* adsm_impl/blocktree.h -- intrusive AVL tree of non-overlapping address ranges [start, end).
 *
 * The runtime keeps one node per shared object, so a faulting address is mapped to its object in
 * O(log objects) and the block inside the object is then plain arithmetic (adsm__tree_block_index).
 * The same tree, keyed the same way, orders the arena's free ranges. Nodes are embedded in the
 * caller's structs, so nothing here ever allocates. Context: the lookups (find, floor, ceil, first,
 * next, prev, block_index) are safe from the SIGSEGV handler: no allocation, no locks, no writes;
 * the caller excludes writers with its own lock. insert and remove write the tree and must only run
 * in normal thread context with that lock held. */
#ifndef ADSM__BLOCKTREE_INCLUDED
#define ADSM__BLOCKTREE_INCLUDED

#include "common.h"

#ifndef ADSM__CONTAINER_OF
/* Recovers the struct that embeds a tree node (or any other member) from a pointer to the member. */
#define ADSM__CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
#endif

typedef struct adsm__tree_node {
    struct adsm__tree_node *left, *right, *parent;
    uintptr_t start, end; /* [start, end), end > start */
    int height;           /* 1 for a leaf; 0 stands for "no node" */
} adsm__tree_node;

typedef struct adsm__tree {
    adsm__tree_node *root;
    size_t count;
} adsm__tree;

/* ---- read-only part: safe in the signal handler ---------------------------------------------- */

ADSM__PRIVATE void adsm__tree_init(adsm__tree *t) {
    t->root = NULL;
    t->count = 0;
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_leftmost(adsm__tree_node *n) {
    while (n && n->left) n = n->left;
    return n;
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_rightmost(adsm__tree_node *n) {
    while (n && n->right) n = n->right;
    return n;
}

/* Ranges never overlap, so ordering by start also orders by end: one comparison per level decides
 * whether addr lies left of, inside, or right of a node. */
ADSM__PRIVATE adsm__tree_node *adsm__tree_find(const adsm__tree *t, uintptr_t addr) {
    adsm__tree_node *n = t->root;
    while (n) {
        if (addr < n->start)
            n = n->left;
        else if (addr >= n->end)
            n = n->right;
        else
            return n;
    }
    return NULL;
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_floor(const adsm__tree *t, uintptr_t addr) {
    adsm__tree_node *n = t->root, *best = NULL;
    while (n) {
        if (n->start <= addr) {
            best = n; /* candidate; a later start that is still <= addr can only be to the right */
            n = n->right;
        } else {
            n = n->left;
        }
    }
    return best;
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_ceil(const adsm__tree *t, uintptr_t addr) {
    adsm__tree_node *n = t->root, *best = NULL;
    while (n) {
        if (n->start >= addr) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_first(const adsm__tree *t) { return adsm__tree_leftmost(t->root); }

ADSM__PRIVATE adsm__tree_node *adsm__tree_next(const adsm__tree_node *n) {
    if (n->right) return adsm__tree_leftmost(n->right);
    /* Climb until we arrive from a left child: that parent is the first larger node. */
    while (n->parent && n->parent->right == n) n = n->parent;
    return n->parent;
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_prev(const adsm__tree_node *n) {
    if (n->left) return adsm__tree_rightmost(n->left);
    while (n->parent && n->parent->left == n) n = n->parent;
    return n->parent;
}

ADSM__PRIVATE size_t adsm__tree_block_index(const adsm__tree_node *n, uintptr_t addr, unsigned block_shift) {
    return (size_t)((addr - n->start) >> block_shift);
}

/* ---- writing part: normal thread context, caller's lock held -------------------------------- */

ADSM__PRIVATE int adsm__tree_height(const adsm__tree_node *n) { return n ? n->height : 0; }

ADSM__PRIVATE void adsm__tree_update_height(adsm__tree_node *n) {
    n->height = 1 + ADSM__MAX(adsm__tree_height(n->left), adsm__tree_height(n->right));
}

/* Points whatever referenced old_child (its parent's link, or the root) at new_child. */
ADSM__PRIVATE void adsm__tree_replace_child(adsm__tree *t, adsm__tree_node *parent, adsm__tree_node *old_child,
                                            adsm__tree_node *new_child) {
    if (!parent)
        t->root = new_child;
    else if (parent->left == old_child)
        parent->left = new_child;
    else
        parent->right = new_child;
    if (new_child) new_child->parent = parent;
}

/* Rotates x down towards `left` (a left rotation: its right child y takes its place, and x becomes
 * y's left child; a right rotation mirrors it); returns y. */
ADSM__PRIVATE adsm__tree_node *adsm__tree_rotate(adsm__tree *t, adsm__tree_node *x, int left) {
    adsm__tree_node **x_child = left ? &x->right : &x->left, *y = *x_child;
    adsm__tree_node **y_child = left ? &y->left : &y->right;
    *x_child = *y_child;
    if (*y_child) (*y_child)->parent = x;
    adsm__tree_replace_child(t, x->parent, x, y);
    *y_child = x;
    x->parent = y;
    adsm__tree_update_height(x);
    adsm__tree_update_height(y);
    return y;
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_rotate_left(adsm__tree *t, adsm__tree_node *x) {
    return adsm__tree_rotate(t, x, 1);
}

ADSM__PRIVATE adsm__tree_node *adsm__tree_rotate_right(adsm__tree *t, adsm__tree_node *x) {
    return adsm__tree_rotate(t, x, 0);
}

/* Restores the AVL property at n (children already balanced); returns the subtree's new root. */
ADSM__PRIVATE adsm__tree_node *adsm__tree_rebalance_node(adsm__tree *t, adsm__tree_node *n) {
    int balance = adsm__tree_height(n->left) - adsm__tree_height(n->right);
    if (balance > 1) {
        if (adsm__tree_height(n->left->left) < adsm__tree_height(n->left->right)) adsm__tree_rotate_left(t, n->left);
        return adsm__tree_rotate_right(t, n);
    }
    if (balance < -1) {
        if (adsm__tree_height(n->right->right) < adsm__tree_height(n->right->left))
            adsm__tree_rotate_right(t, n->right);
        return adsm__tree_rotate_left(t, n);
    }
    adsm__tree_update_height(n);
    return n;
}

/* Walks to the root fixing heights and balance. Always going all the way up keeps this simple;
 * it is O(log n) either way. */
ADSM__PRIVATE void adsm__tree_rebalance_upward(adsm__tree *t, adsm__tree_node *n) {
    while (n) n = adsm__tree_rebalance_node(t, n)->parent;
}

ADSM__PRIVATE int adsm__tree_overlaps(const adsm__tree_node *a, const adsm__tree_node *b) {
    return a->start < b->end && b->start < a->end;
}

ADSM__PRIVATE int adsm__tree_insert(adsm__tree *t, adsm__tree_node *n) {
    adsm__tree_node *parent = NULL, *cur = t->root;
    /* The new range's in-order neighbours (the only ranges it could overlap) both lie on this
     * descent path, so checking every node passed is a complete overlap test. */
    while (cur) {
        if (adsm__tree_overlaps(n, cur)) return -1;
        parent = cur;
        cur = n->start < cur->start ? cur->left : cur->right;
    }
    n->left = n->right = NULL;
    n->parent = parent;
    n->height = 1;
    if (!parent)
        t->root = n;
    else if (n->start < parent->start)
        parent->left = n;
    else
        parent->right = n;
    t->count++;
    adsm__tree_rebalance_upward(t, parent);
    return 0;
}

/* Removes a node with two children by moving its in-order successor s into its place; nodes are
 * the caller's memory, so we relink rather than copy keys. Returns where rebalancing starts. */
ADSM__PRIVATE adsm__tree_node *adsm__tree_splice_successor(adsm__tree *t, adsm__tree_node *n) {
    adsm__tree_node *s = adsm__tree_leftmost(n->right);
    adsm__tree_node *fix_from;
    if (s->parent == n) {
        fix_from = s; /* s keeps its right subtree and just moves up */
    } else {
        fix_from = s->parent;
        s->parent->left = s->right; /* s has no left child */
        if (s->right) s->right->parent = s->parent;
        s->right = n->right;
        s->right->parent = s;
    }
    s->left = n->left;
    s->left->parent = s;
    adsm__tree_replace_child(t, n->parent, n, s);
    s->height = n->height;
    return fix_from;
}

ADSM__PRIVATE void adsm__tree_remove(adsm__tree *t, adsm__tree_node *n) {
    adsm__tree_node *fix_from;
    if (n->left && n->right) {
        fix_from = adsm__tree_splice_successor(t, n);
    } else {
        adsm__tree_node *child = n->left ? n->left : n->right;
        fix_from = n->parent;
        adsm__tree_replace_child(t, n->parent, n, child);
    }
    t->count--;
    n->left = n->right = n->parent = NULL;
    n->height = 0;
    adsm__tree_rebalance_upward(t, fix_from);
}

#endif /* ADSM__BLOCKTREE_INCLUDED */
