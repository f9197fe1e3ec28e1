/* The loader's hot loop: copy a stretch of an epoch's token stream out of the mapped shards
 * into rows of a batch, widened to int64, in one pass.
 *
 * In Python this took a Python object per document, a `bytes.join` (one copy) and a
 * fancy-indexed assignment (a second, widening copy). Here each token is read once and
 * written once, with the GIL released. Documents lie at random places in the shards, so the
 * start of the next one is prefetched while this one is copied: without that, every document
 * begins with a stall on memory (about 20% of the copy's time, measured).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define PREFETCH_BYTES 2048 /* of the next document, requested while this one is copied */

typedef struct {
    const uint64_t *address; /* per document: the address of its first token */
    const int64_t *bounds;   /* document k is stream tokens [bounds[k], bounds[k + 1]) */
    Py_ssize_t documents;
    int64_t lo;              /* the stretch starts at this stream token */
    const int64_t *rows;     /* the batch row of each seq_len tokens of the stretch */
    Py_ssize_t seq_len;
    int64_t *out;
} Stretch;

static inline void prefetch(uint64_t address, int64_t bytes) {
    const char *start = (const char *)(uintptr_t)address;
    for (int64_t offset = 0; offset < bytes && offset < PREFETCH_BYTES; offset += 64) {
        __builtin_prefetch(start + offset, 0, 0);
    }
}

#define DEFINE_COPY(NAME, TYPE)                                                             \
    static void NAME(const Stretch *s, int64_t hi) {                                        \
        int64_t position = s->lo; /* the stream token written next */                       \
        for (Py_ssize_t k = 0; k < s->documents; k++) {                                     \
            if (k + 1 < s->documents) {                                                     \
                prefetch(s->address[k + 1], (s->bounds[k + 2] - s->bounds[k + 1]) * sizeof(TYPE)); \
            }                                                                               \
            int64_t end = s->bounds[k + 1] < hi ? s->bounds[k + 1] : hi;                    \
            const TYPE *src = (const TYPE *)(uintptr_t)s->address[k] +                      \
                              (position - s->bounds[k]);                                    \
            while (position < end) {                                                        \
                int64_t offset = position - s->lo;                                          \
                int64_t column = offset % s->seq_len;                                       \
                int64_t *dst = s->out + s->rows[offset / s->seq_len] * s->seq_len + column; \
                int64_t take = s->seq_len - column < end - position ? s->seq_len - column   \
                                                                    : end - position;       \
                for (int64_t i = 0; i < take; i++) {                                        \
                    dst[i] = src[i];                                                        \
                }                                                                           \
                src += take;                                                                \
                position += take;                                                           \
            }                                                                               \
        }                                                                                   \
    }

DEFINE_COPY(copy_u16, uint16_t)
DEFINE_COPY(copy_u32, uint32_t)

/* Why `s` cannot be copied safely, or NULL: the bounds must rise and cover the stretch, and
 * the rows must lie inside `out`. */
static const char *check(const Stretch *s, Py_ssize_t row_count, Py_ssize_t out_rows) {
    int64_t hi = s->lo + (int64_t)row_count * s->seq_len;
    if (s->documents < 1 || s->bounds[0] > s->lo || s->bounds[s->documents] < hi) {
        return "the documents do not cover the stretch";
    }
    for (Py_ssize_t k = 0; k < s->documents; k++) {
        if (s->bounds[k + 1] < s->bounds[k]) {
            return "document bounds decrease";
        }
    }
    for (Py_ssize_t r = 0; r < row_count; r++) {
        if (s->rows[r] < 0 || s->rows[r] >= out_rows) {
            return "a row lies outside the output";
        }
    }
    return NULL;
}

static PyObject *widen_into(PyObject *self, PyObject *args) {
    Py_buffer address, bounds, rows, out;
    long long lo;
    Py_ssize_t itemsize, seq_len;
    if (!PyArg_ParseTuple(args, "y*y*Lny*nw*", &address, &bounds, &lo, &itemsize, &rows,
                          &seq_len, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t documents = address.len / 8, row_count = rows.len / 8;
    const char *problem = NULL;
    if (itemsize != 2 && itemsize != 4) {
        problem = "token itemsize must be 2 or 4";
    } else if (seq_len <= 0 || bounds.len != address.len + 8) {
        problem = "seq_len must be positive, with one bound more than addresses";
    }
    Stretch s = {address.buf, bounds.buf, documents, lo, rows.buf, seq_len, out.buf};
    if (problem == NULL) {
        problem = check(&s, row_count, out.len / 8 / seq_len);
    }
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
    } else {
        int64_t hi = lo + (int64_t)row_count * seq_len;
        Py_BEGIN_ALLOW_THREADS
        if (itemsize == 2) {
            copy_u16(&s, hi);
        } else {
            copy_u32(&s, hi);
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&address);
    PyBuffer_Release(&bounds);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"widen_into", widen_into, METH_VARARGS,
     "widen_into(addresses, bounds, lo, itemsize, rows, seq_len, out)\n\n"
     "Copy stream tokens [lo, lo + len(rows) * seq_len) of the documents (uint64 addresses of\n"
     "their first tokens, int64 stream bounds, one more than addresses) into the int64 array\n"
     "`out`, seq_len tokens to a row, the k-th row of the stretch into row rows[k]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gather", NULL, -1, methods};

PyMODINIT_FUNC PyInit__gather(void) { return PyModule_Create(&module); }
