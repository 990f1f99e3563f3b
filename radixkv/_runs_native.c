/* Runs of page ids (radixkv/runs.py) to slots, and two scans of the request path, in C: built beside the mypyc core by
 * radixkv/build.py and used only while the compiled core runs (radixkv/core_loader.py); the Python forms beside their
 * callers compute the same, interpreted.
 *
 *     slots(runs, n, page_size)         int64 [n], a fresh array: the first n slots of the pages of `runs`
 *     starts(runs, page_size, given)    whether int64 [m] `given` are the first m of those slots
 *     negative(tokens)                  whether int32 [n] `tokens` holds a value below 0 (radixkv/tokens.py)
 *     shared(key, edge, pos, page_bytes)  bytes of whole pages `edge` and key[pos:] share (radix/core.py's walk)
 *     joined(head, lo, hi, key)         head[lo:hi] + key, one copy (radix/shadow.py's insert after its match)
 *     starts_part(key, head, lo, hi)    key.startswith(head[lo:hi]), no copy (the same)
 *     xxh3_words(raw, step, n, seed)    XXH3_64 of n blocks of 33-64 bytes, each seeded by the one before, as n
 *                                       8-byte little-endian words (radixkv/events/hashing.py's KV event block hashes)
 *     words_ints(words)                 those words as a list of ints (radixkv/events/records.py's BlockHashes)
 *     word_at(words, k)                 word k of them as an int (the same)
 *     heap_place, heap_pop              a shadow's leaf heap: heapq's sifts, int keys compared by their digits
 *                                       (radix/shadow_heap.py; the block before the method table)
 *
 * Page p holds slots [p * page_size, (p + 1) * page_size), so a run of pages is a run of slots. One call where
 * numpy takes one to four (2-7k instructions each): a loop of ~1-3 instructions a slot, no copy of `given`.
 * `negative` is one pass with no numpy call (argmin and `item` cost ~2.5k instructions a call besides the scan);
 * `shared` one memcmp with no argument parsing (bytes.startswith at an offset is a generic call, compiled: a tuple
 * and PyArg_ParseTuple, ~1.2k instructions).
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>

/* The loops over every slot or token, each in its own function. Where GCC can pick a function's build when the
 * module loads (an ifunc: glibc on x86-64), each is built twice, for AVX2 (4 slots or 8 tokens a vector) and for the
 * baseline (SSE2: 2 or 4), and the CPU's own is taken: half the instructions a slot where AVX2 runs. Elsewhere one
 * build. The same results either way: integer loops, no rounding. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define WIDE __attribute__((target_clones("avx2", "default")))
#else
#define WIDE
#endif

/* at[i] = first + i for i in [0, length). */
WIDE static void fill(npy_int64 *at, long long first, long long length) {
#pragma GCC unroll 8
    for (long long i = 0; i < length; i++) {
        at[i] = first + i;
    }
}

/* Nonzero iff values[i] != want + i for some i in [0, length) (an OR of differences: no branch a slot). */
WIDE static unsigned long long differ(const npy_int64 *values, long long want, long long length) {
    unsigned long long d = 0;
#pragma GCC unroll 8
    for (long long i = 0; i < length; i++, want++) {  /* (`want + i` instead: ~18% more instructions, either build) */
        d |= (unsigned long long)(values[i] ^ want);
    }
    return d;
}

/* The OR of n int32 values (its sign bit: whether any is negative). */
WIDE static npy_uint32 or_all(const npy_int32 *values, Py_ssize_t n) {
    npy_uint32 any = 0;
#pragma GCC unroll 4
    for (Py_ssize_t i = 0; i < n; i++) {
        any |= (npy_uint32)values[i];
    }
    return any;
}

/* Run j of `runs` in slots: its first slot and its length, both >= 0; -1 with an exception set otherwise. */
static int run_slots(PyObject *runs, Py_ssize_t j, long long page_size, long long *first, long long *length) {
    PyObject *start = PyList_GET_ITEM(runs, j), *size = PyList_GET_ITEM(runs, j + 1);
    if (!PyLong_CheckExact(start) || !PyLong_CheckExact(size)) {
        PyErr_SetString(PyExc_TypeError, "runs must be a list of ints");
        return -1;
    }
    long long s = PyLong_AsLongLong(start), k = PyLong_AsLongLong(size);
    if ((s == -1 || k == -1) && PyErr_Occurred()) {
        return -1;
    }
    if (s < 0 || k < 0) {
        PyErr_SetString(PyExc_ValueError, "runs: starts and lengths must be >= 0");
        return -1;
    }
    *first = s * page_size;
    *length = k * page_size;
    return 0;
}

/* Three arguments, a list first; the page size (args[at]) >= 1. */
static int parse(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t at, const char *usage, long long *page_size) {
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *page_size = PyLong_AsLongLong(args[at]);
    if (*page_size == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*page_size < 1) {
        PyErr_SetString(PyExc_ValueError, "page_size must be >= 1");
        return -1;
    }
    return 0;
}

static PyObject *slots(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    long long page_size;
    if (parse(args, nargs, 2, "slots(runs: list[int], n: int, page_size: int)", &page_size) < 0) {
        return NULL;
    }
    PyObject *runs = args[0];
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "slots: n must be >= 0");
        return NULL;
    }
    npy_intp dims[1] = {n};
    PyObject *out = PyArray_SimpleNew(1, dims, NPY_INT64);
    if (out == NULL) {
        return NULL;
    }
    npy_int64 *at = (npy_int64 *)PyArray_DATA((PyArrayObject *)out);
    long long left = n;
    for (Py_ssize_t j = 0; left > 0 && j + 1 < PyList_GET_SIZE(runs); j += 2) {
        long long first, length;
        if (run_slots(runs, j, page_size, &first, &length) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        if (length > left) {
            length = left;
        }
        fill(at, first, length);
        at += length;
        left -= length;
    }
    if (left > 0) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, "slots: the runs hold fewer than n slots");
        return NULL;
    }
    return out;
}

static PyObject *starts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    long long page_size;
    if (parse(args, nargs, 1, "starts(runs: list[int], page_size: int, given: ndarray)", &page_size) < 0) {
        return NULL;
    }
    PyObject *runs = args[0], *given = args[2];
    if (!PyArray_Check(given) || PyArray_NDIM((PyArrayObject *)given) != 1
            || PyArray_TYPE((PyArrayObject *)given) != NPY_INT64) {
        PyErr_SetString(PyExc_TypeError, "starts: `given` must be a 1-d int64 array");
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)given;
    long long left = PyArray_DIM(arr, 0);
    npy_intp stride = PyArray_STRIDE(arr, 0);
    const char *data = PyArray_BYTES(arr);
    unsigned long long wrong = 0;  /* (an OR of differences, no branch a slot: the loop vectorizes) */
    for (Py_ssize_t j = 0; left > 0 && j + 1 < PyList_GET_SIZE(runs); j += 2) {
        long long first, length;
        if (run_slots(runs, j, page_size, &first, &length) < 0) {
            return NULL;
        }
        if (length > left) {
            length = left;
        }
        if (stride == sizeof(npy_int64)) {
            wrong |= differ((const npy_int64 *)data, first, length);
        } else {
            for (long long i = 0; i < length; i++) {
                wrong |= (unsigned long long)(*(const npy_int64 *)(data + i * stride) ^ (first + i));
            }
        }
        if (wrong) {
            Py_RETURN_FALSE;
        }
        data += length * stride;
        left -= length;
    }
    if (left > 0) {  /* more slots given than the runs hold */
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* The first index in [0, n) where a and b differ, n if none: memcmp by 256-byte blocks, then bytes. */
static Py_ssize_t first_difference(const char *a, const char *b, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i + 256 <= n && memcmp(a + i, b + i, 256) == 0) {
        i += 256;
    }
    while (i < n && a[i] == b[i]) {
        i++;
    }
    return i;
}

static PyObject *negative(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 1 || !PyArray_Check(args[0]) || PyArray_NDIM((PyArrayObject *)args[0]) != 1
            || PyArray_TYPE((PyArrayObject *)args[0]) != NPY_INT32) {
        PyErr_SetString(PyExc_TypeError, "negative(tokens: a 1-d int32 ndarray)");
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)args[0];
    Py_ssize_t n = PyArray_DIM(arr, 0);
    npy_intp stride = PyArray_STRIDE(arr, 0);
    const char *data = PyArray_BYTES(arr);
    npy_uint32 any = 0;  /* (an OR of the values: the sign bit says) */
    if (stride == sizeof(npy_int32)) {
        any = or_all((const npy_int32 *)data, n);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            any |= (npy_uint32)*(const npy_int32 *)(data + i * stride);
        }
    }
    return PyBool_FromLong(any >> 31);
}

static PyObject *shared(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "shared(key: bytes, edge: bytes, pos: int, page_bytes: int)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]), page_bytes = PyLong_AsSsize_t(args[3]);
    if ((pos == -1 || page_bytes == -1) && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t key_len = PyBytes_GET_SIZE(args[0]), edge_len = PyBytes_GET_SIZE(args[1]);
    if (pos < 0 || pos > key_len || page_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "shared: 0 <= pos <= len(key) and page_bytes >= 1");
        return NULL;
    }
    const char *key = PyBytes_AS_STRING(args[0]) + pos, *edge = PyBytes_AS_STRING(args[1]);
    Py_ssize_t n = key_len - pos < edge_len ? key_len - pos : edge_len;
    if (n == edge_len && memcmp(key, edge, n) == 0) {
        return PyLong_FromSsize_t(edge_len);
    }
    Py_ssize_t same = first_difference(key, edge, n);
    return PyLong_FromSsize_t(same - same % page_bytes);
}

/* head[lo:hi] as (pointer, length) after checking args[0..2] (head: bytes, 0 <= lo <= hi <= len(head)); 0 on error. */
static int part(PyObject *const *args, const char *what, const char **at, Py_ssize_t *n) {
    if (!PyBytes_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s: bytes expected", what);
        return 0;
    }
    Py_ssize_t lo = PyLong_AsSsize_t(args[1]), hi = PyLong_AsSsize_t(args[2]);
    if ((lo == -1 || hi == -1) && PyErr_Occurred()) {
        return 0;
    }
    if (lo < 0 || lo > hi || hi > PyBytes_GET_SIZE(args[0])) {
        PyErr_Format(PyExc_ValueError, "%s: 0 <= lo <= hi <= len(head)", what);
        return 0;
    }
    *at = PyBytes_AS_STRING(args[0]) + lo;
    *n = hi - lo;
    return 1;
}

static PyObject *joined(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *at;
    Py_ssize_t n;
    if (nargs != 4 || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "joined(head: bytes, lo: int, hi: int, key: bytes)");
        return NULL;
    }
    if (!part(args, "joined", &at, &n)) {
        return NULL;
    }
    Py_ssize_t m = PyBytes_GET_SIZE(args[3]);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n + m);
    if (out != NULL) {
        memcpy(PyBytes_AS_STRING(out), at, n);
        memcpy(PyBytes_AS_STRING(out) + n, PyBytes_AS_STRING(args[3]), m);
    }
    return out;
}

static PyObject *starts_part(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *at;
    Py_ssize_t n;
    if (nargs != 4 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "starts_part(key: bytes, head: bytes, lo: int, hi: int)");
        return NULL;
    }
    if (!part(args + 1, "starts_part", &at, &n)) {
        return NULL;
    }
    return PyBool_FromLong(n <= PyBytes_GET_SIZE(args[0]) && memcmp(PyBytes_AS_STRING(args[0]), at, n) == 0);
}

/* XXH3_64 with a seed, for inputs of 33 to 64 bytes: the two-round case of the 17-128-byte path of xxHash's
 * specification (github.com/Cyan4973/xxHash, doc/xxhash_spec.md, "XXH3 Algorithm Description (for medium inputs)").
 * Words are read little-endian whatever the machine; the 128-bit product is the compiler's. */
#define XXH_PRIME64_1 0x9E3779B185EBCA87ULL
#define XXH_PRIME_MX1 0x165667919E3779F9ULL

static const unsigned long long xxh_secret[8] = {  /* the default secret's first 64 bytes, little-endian words */
    0xBE4BA423396CFEB8ULL, 0x1CAD21F72C81017CULL, 0xDB979083E96DD4DEULL, 0x1F67B3B7A4A44072ULL,
    0x78E5C0CC4EE679CBULL, 0x2172FFCC7DD05A82ULL, 0x8E2443F7744608B8ULL, 0x4C263A81E69035E0ULL,
};

static unsigned long long read_le64(const unsigned char *p) {
    unsigned long long x = 0;
    for (int i = 7; i >= 0; i--) {
        x = x << 8 | p[i];
    }
    return x;
}

/* the 128-bit product's low half xor its high half */
static unsigned long long fold64(unsigned long long a, unsigned long long b) {
#ifdef __SIZEOF_INT128__
    unsigned __int128 product = (unsigned __int128)a * b;
    return (unsigned long long)product ^ (unsigned long long)(product >> 64);
#else  /* from 32-bit halves */
    unsigned long long al = a & 0xFFFFFFFFULL, ah = a >> 32, bl = b & 0xFFFFFFFFULL, bh = b >> 32;
    unsigned long long ll = al * bl, hl = ah * bl, lh = al * bh;
    unsigned long long cross = (ll >> 32) + (hl & 0xFFFFFFFFULL) + lh;
    return (a * b) ^ ((hl >> 32) + (cross >> 32) + ah * bh);
#endif
}

static unsigned long long mix16(const unsigned char *in, int word, unsigned long long seed) {
    return fold64(read_le64(in) ^ (xxh_secret[word] + seed), read_le64(in + 8) ^ (xxh_secret[word + 1] - seed));
}

static unsigned long long xxh3_33_64(const unsigned char *in, Py_ssize_t len, unsigned long long seed) {
    unsigned long long acc = (unsigned long long)len * XXH_PRIME64_1;
    acc += mix16(in + 16, 4, seed) + mix16(in + len - 32, 6, seed);
    acc += mix16(in, 0, seed) + mix16(in + len - 16, 2, seed);
    acc = (acc ^ acc >> 37) * XXH_PRIME_MX1;
    return acc ^ acc >> 32;
}

static PyObject *xxh3_words(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "xxh3_words(raw: bytes, step: int, n: int, seed: int)");
        return NULL;
    }
    Py_ssize_t step = PyLong_AsSsize_t(args[1]), n = PyLong_AsSsize_t(args[2]);
    if ((step == -1 || n == -1) && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long long h = PyLong_AsUnsignedLongLong(args[3]);
    if (h == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    if (step < 33 || step > 64 || n < 0 || n > PyBytes_GET_SIZE(args[0]) / step) {
        PyErr_SetString(PyExc_ValueError, "xxh3_words: 33 <= step <= 64 and 0 <= n * step <= len(raw)");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 8 * n);
    if (out == NULL) {
        return NULL;
    }
    const unsigned char *at = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    unsigned char *word = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t b = 0; b < n; b++, at += step, word += 8) {
        h = xxh3_33_64(at, step, h);
        for (int i = 0; i < 8; i++) {  /* little-endian whatever the machine */
            word[i] = (unsigned char)(h >> 8 * i);
        }
    }
    return out;
}

/* ---- KV events' block hashes as words (radixkv/events/records.py's BlockHashes) ---- */

/* word_at(words, k): word k of `words` as an int (int.from_bytes of a slice is a generic call compiled, ~1k
 * instructions); IndexError unless 0 <= k < len(words) // 8. */
static PyObject *word_at(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "word_at(words: bytes, k: int)");
        return NULL;
    }
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    if (k == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (k < 0 || k >= PyBytes_GET_SIZE(args[0]) / 8) {
        PyErr_SetString(PyExc_IndexError, "word_at: k past the words");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(read_le64((const unsigned char *)PyBytes_AS_STRING(args[0]) + 8 * k));
}

/* words_ints(words): the 8-byte little-endian words of `words` as a list of ints in [0, 2**64), in one call. */
static PyObject *words_ints(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 1 || !PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) % 8) {
        PyErr_SetString(PyExc_TypeError, "words_ints(words: bytes), a multiple of 8 bytes long");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]) / 8;
    const unsigned char *at = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t b = 0; out != NULL && b < n; b++, at += 8) {
        PyObject *h = PyLong_FromUnsignedLongLong(read_le64(at));
        if (h == NULL) {
            Py_CLEAR(out);
        } else {
            PyList_SET_ITEM(out, b, h);
        }
    }
    return out;
}

/* A shadow's leaf heap (radix/shadow_heap.py): heapq's own sifts (Modules/_heapqmodule.c, the same moves, so the same
 * list), entries ordered as Python orders them, but for two ints, or two tuples whose first items are unequal ints (a
 * shadow's (int key, node) entries), compared here by the ints' digits: where heapq compares two such entries by
 * generic rich comparisons (~80 instructions an int, twice that a tuple), this reads the digits (~10).
 *
 *     heap_place(heap, item, top)  heapq.heappush, or with `top` heap[0] := item and a sift down (none where item is
 *                                  no greater than heap[1] and heap[2]: a trimmed victim's key mostly stays least)
 *     heap_pop(heap)               heapq.heappop */

/* sign(a - b) for two exact ints: by their digits where the layout is known (CPython's own long_compare, before
 * 3.12), else as long longs where both fit; 2 where neither. */
static int int_order(PyObject *a, PyObject *b) {
#if PY_VERSION_HEX < 0x030C0000
    Py_ssize_t size_a = Py_SIZE(a), size_b = Py_SIZE(b);
    if (size_a != size_b) {
        return size_a < size_b ? -1 : 1;
    }
    const digit *da = ((PyLongObject *)a)->ob_digit, *db = ((PyLongObject *)b)->ob_digit;
    Py_ssize_t i = size_a < 0 ? -size_a : size_a;
    while (--i >= 0 && da[i] == db[i]) {
    }
    if (i < 0) {
        return 0;
    }
    return (da[i] < db[i]) == (size_a > 0) ? -1 : 1;
#else
    int over_a, over_b;
    long long x = PyLong_AsLongLongAndOverflow(a, &over_a), y = PyLong_AsLongLongAndOverflow(b, &over_b);
    return over_a || over_b ? 2 : (x > y) - (x < y);
#endif
}

/* a < b: 1 or 0, -1 on error (module comment above). */
static int key_less(PyObject *a, PyObject *b) {
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) > 0 && PyTuple_GET_SIZE(b) > 0) {
        PyObject *x = PyTuple_GET_ITEM(a, 0), *y = PyTuple_GET_ITEM(b, 0);
        if (PyLong_CheckExact(x) && PyLong_CheckExact(y)) {
            int order = int_order(x, y);
            if (order == -1 || order == 1) {  /* (equal: the next items decide, as Python's `<` does) */
                return order < 0;
            }
        }
    } else if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int order = int_order(a, b);
        if (order != 2) {
            return order < 0;
        }
    }
    Py_INCREF(a);
    Py_INCREF(b);
    int cmp = PyObject_RichCompareBool(a, b, Py_LT);
    Py_DECREF(a);
    Py_DECREF(b);
    return cmp;
}

/* heapq's siftdown: heap[pos] moves up towards startpos while less than its parent. 0, or -1 on error. */
static int sift_down(PyObject *heap, Py_ssize_t startpos, Py_ssize_t pos) {
    Py_ssize_t size = PyList_GET_SIZE(heap);
    while (pos > startpos) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        PyObject **arr = ((PyListObject *)heap)->ob_item;
        int cmp = key_less(arr[pos], arr[parentpos]);
        if (cmp < 0) {
            return -1;
        }
        if (size != PyList_GET_SIZE(heap)) {
            PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
            return -1;
        }
        if (cmp == 0) {
            break;
        }
        arr = ((PyListObject *)heap)->ob_item;
        PyObject *parent = arr[parentpos];
        arr[parentpos] = arr[pos];
        arr[pos] = parent;
        pos = parentpos;
    }
    return 0;
}

/* heapq's siftup: the smaller child moves up from pos to a leaf, then heap[pos]'s item sifts down into place. */
static int sift_up(PyObject *heap, Py_ssize_t pos) {
    Py_ssize_t endpos = PyList_GET_SIZE(heap), startpos = pos, limit = endpos >> 1;
    while (pos < limit) {
        Py_ssize_t childpos = 2 * pos + 1;
        PyObject **arr = ((PyListObject *)heap)->ob_item;
        if (childpos + 1 < endpos) {
            int cmp = key_less(arr[childpos], arr[childpos + 1]);
            if (cmp < 0) {
                return -1;
            }
            childpos += cmp ^ 1;  /* the right child where the left one is not less */
            if (endpos != PyList_GET_SIZE(heap)) {
                PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
                return -1;
            }
            arr = ((PyListObject *)heap)->ob_item;
        }
        PyObject *child = arr[childpos];
        arr[childpos] = arr[pos];
        arr[pos] = child;
        pos = childpos;
    }
    return sift_down(heap, startpos, pos);
}

/* heapq.heappop(heap), heap a list: a new reference, NULL on error. */
static PyObject *pop_first(PyObject *heap) {
    Py_ssize_t n = PyList_GET_SIZE(heap);
    if (n == 0) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    PyObject *last = PyList_GET_ITEM(heap, n - 1);
    Py_INCREF(last);
    if (PyList_SetSlice(heap, n - 1, n, NULL) < 0) {
        Py_DECREF(last);
        return NULL;
    }
    if (n == 1) {
        return last;
    }
    PyObject *first = PyList_GET_ITEM(heap, 0);
    PyList_SET_ITEM(heap, 0, last);
    if (sift_up(heap, 0) < 0) {
        Py_DECREF(first);
        return NULL;
    }
    return first;
}

/* heapq.heappush(heap, item), or with `top` item in place of heap[0] (heap_place): 0, or -1 on error. */
static int place(PyObject *heap, PyObject *item, PyObject *top_arg) {
    int top = PyObject_IsTrue(top_arg);
    if (top < 0) {
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(heap);
    if (!top) {
        return PyList_Append(heap, item) < 0 ? -1 : sift_down(heap, 0, n);
    }
    if (n == 0) {
        PyErr_SetString(PyExc_IndexError, "top of an empty heap");
        return -1;
    }
    int below = 0;  /* a child is less than item */
    for (Py_ssize_t i = 1; i < 3 && i < n && !below; i++) {
        below = key_less(PyList_GET_ITEM(heap, i), item);
        if (below < 0) {
            return -1;
        }
    }
    Py_INCREF(item);
    PyObject *old = PyList_GET_ITEM(heap, 0);
    PyList_SET_ITEM(heap, 0, item);
    Py_DECREF(old);
    return below ? sift_up(heap, 0) : 0;
}

static PyObject *heap_place(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "heap_place(heap: list, item, top: bool)");
        return NULL;
    }
    if (place(args[0], args[1], args[2]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *heap_pop(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "heap_pop(heap: list)");
        return NULL;
    }
    return pop_first(args[0]);
}

static PyMethodDef methods[] = {
    {"slots", (PyCFunction)(void (*)(void))slots, METH_FASTCALL, "int64 [n]: the first n slots of runs' pages."},
    {"starts", (PyCFunction)(void (*)(void))starts, METH_FASTCALL, "Whether `given` are the first slots of runs."},
    {"negative", (PyCFunction)(void (*)(void))negative, METH_FASTCALL, "Whether int32 `tokens` holds a value < 0."},
    {"shared", (PyCFunction)(void (*)(void))shared, METH_FASTCALL, "Bytes of whole pages edge and key[pos:] share."},
    {"joined", (PyCFunction)(void (*)(void))joined, METH_FASTCALL, "head[lo:hi] + key, one copy."},
    {"starts_part", (PyCFunction)(void (*)(void))starts_part, METH_FASTCALL, "key.startswith(head[lo:hi]), no copy."},
    {"xxh3_words", (PyCFunction)(void (*)(void))xxh3_words, METH_FASTCALL, "XXH3_64 of chained 33-64-byte blocks."},
    {"words_ints", (PyCFunction)(void (*)(void))words_ints, METH_FASTCALL, "8-byte little-endian words as ints."},
    {"word_at", (PyCFunction)(void (*)(void))word_at, METH_FASTCALL, "Word k of 8-byte little-endian words, an int."},
    {"heap_place", (PyCFunction)(void (*)(void))heap_place, METH_FASTCALL, "heapq.heappush, or in place of heap[0]."},
    {"heap_pop", (PyCFunction)(void (*)(void))heap_pop, METH_FASTCALL, "heapq.heappop, int keys compared as such."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_runs_native", "Runs to slots, and two scans, in C (radixkv/runs.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__runs_native(void) {
    import_array();
    return PyModule_Create(&module_def);
}
