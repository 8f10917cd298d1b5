/* Compiled kernels of leakattack's sketches (module leakattack.sketch._kernels):
 *   - transform: in-place unnormalised fast Walsh-Hadamard transform (natural / Sylvester
 *     order) on contiguous float32 or float64 rows: x <- H_n x for every row of (rows, n);
 *   - bucket_plan, scatter, gather: sparse maps (count-sketch, sparse embedding, the SRHT's
 *     row selection) applied in cache-sized buckets (see the section below);
 *   - srht: a whole SRHT apply or adjoint in one transform, its sign flips, zero padding and
 *     row selection done while the data is in cache for the first and the last pass.
 *
 * H_n = H_2 (x) ... (x) H_2, so the log2(n) index bits may be transformed in any order
 * and grouping.  The kernel groups them by where the data lives:
 *   1. contiguous blocks of 256 KiB to 1 MiB (in the L2 cache; larger when that saves a
 *      pass over memory) are transformed completely:
 *      L1-sized chunks first (the lowest bits of each 32-byte vector by lane shuffles,
 *      the next three by a radix-8 butterfly across eight vectors in registers, then
 *      radix-8 passes inside the chunk), then radix-8 passes across the chunks;
 *   2. the bits above the block are done in as few passes over memory as possible
 *      (up to HIGH_BITS bits each): a tile of 2^p rows one block apart, each W >= 1 KiB
 *      wide (runs long enough for the hardware prefetchers), is read once into a
 *      contiguous buffer by the first radix-8 stage, transformed there, and written back
 *      by the last stage (rows a power of two apart would fight over the same cache sets).
 * A transform of n = 2^24 floats thus reads and writes memory twice.  Work is split over
 * POSIX threads by blocks and by tiles, with a join between passes; the caller picks the
 * thread count.  The GIL is released while a kernel runs.
 *
 * Vectors are GCC/Clang vector extensions (32 bytes); on x86-64 Linux the hot loops are
 * compiled twice (AVX2 and baseline) and picked at load time (target_clones).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <pthread.h>
#define FWHT_THREADS 1
#else
#define FWHT_THREADS 0
#endif

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && \
    (!defined(__clang__) || __clang_major__ >= 14)
#define MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define MULTIVERSION
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* 32-byte vectors only cross inlined calls */
#endif

#define INLINE static inline __attribute__((always_inline))

/* Tuning (bytes), set on a 2-core AMD EPYC (32 KiB L1d, 1 MiB L2 per core): a block is
 * transformed completely while in L2, a chunk while in L1; a tile of a high pass holds
 * TILE_BYTES (in L2). */
#define BLOCK_BYTES (1 << 18)     /* ... grown up to BLOCK_MAX_BYTES when that saves a high pass */
#define BLOCK_MAX_BYTES (1 << 20)
#define CHUNK_BYTES (1 << 14)
#define TILE_BYTES (1 << 20)
#define TILE_MAX_BYTES (1 << 21)
#define HIGH_BITS 9

typedef float vf __attribute__((vector_size(32)));
typedef double vd __attribute__((vector_size(32)));
typedef int32_t vi32 __attribute__((vector_size(32)));
typedef int64_t vi64 __attribute__((vector_size(32)));

#if defined(__clang__)
#define SHUF8(v, a, b, c, d, e, f, g, h) __builtin_shufflevector(v, v, a, b, c, d, e, f, g, h)
#define SHUF4(v, a, b, c, d) __builtin_shufflevector(v, v, a, b, c, d)
#else
#define SHUF8(v, a, b, c, d, e, f, g, h) __builtin_shuffle(v, (vi32){a, b, c, d, e, f, g, h})
#define SHUF4(v, a, b, c, d) __builtin_shuffle(v, (vi64){a, b, c, d})
#endif

/* H_8 (float) or H_4 (double) inside one vector: for bit j, lane i gets
 * x[i & ~2^j] + x[i | 2^j] or x[i & ~2^j] - x[i | 2^j]:  t = x with lanes i and i ^ 2^j
 * swapped, then t + x in the lower lane and t - x in the upper lane (x * sign + t). */
INLINE vf invec_f(vf x) {
    x = SHUF8(x, 1, 0, 3, 2, 5, 4, 7, 6) + x * (vf){1, -1, 1, -1, 1, -1, 1, -1};
    x = SHUF8(x, 2, 3, 0, 1, 6, 7, 4, 5) + x * (vf){1, 1, -1, -1, 1, 1, -1, -1};
    x = SHUF8(x, 4, 5, 6, 7, 0, 1, 2, 3) + x * (vf){1, 1, 1, 1, -1, -1, -1, -1};
    return x;
}

INLINE vd invec_d(vd x) {
    x = SHUF4(x, 1, 0, 3, 2) + x * (vd){1, -1, 1, -1};
    x = SHUF4(x, 2, 3, 0, 1) + x * (vd){1, 1, -1, -1};
    return x;
}

INLINE int ilog2(size_t n) {
    int k = 0;
    while (((size_t)1 << k) < n) k++;
    return k;
}

/* One pass plan of the high bits: p bits at row pitch 2^a; tiles are (group, column) pairs. */
typedef struct {
    int a, p;
    size_t W, tiles_per_row;
} high_pass;

/* Hooks that fuse one transform of a single row of n entries with what comes before and after it:
 * the first pass calls fill(ctx, dst, off, len) to write input entries [off, off + len) into a
 * block just before transforming it (the block is then in cache), and the last pass calls
 * drain(ctx, src, off, len) with finished entries [off, off + len) instead of writing them back. */
typedef struct {
    void (*fill)(const void *ctx, void *dst, size_t off, size_t len);
    void (*drain)(const void *ctx, const void *src, size_t off, size_t len);
    const void *ctx;
} hooks_t;

/* The type-generic kernels: T the element, V its 32-byte vector, VL lanes, INVEC the
 * in-vector transform, S a name suffix.  bfly<R> computes H_R across R rows of W elements
 * (W % VL == 0), reading rows src + m * ss and writing rows dst + m * ds (in place when
 * dst == src: each column is read before it is written). */
#define FWHT_KERNELS(T, V, VL, INVEC, S)                                                         \
    INLINE V load_##S(const T *p) { V v; memcpy(&v, p, sizeof v); return v; }                  \
    INLINE void store_##S(T *p, V v) { memcpy(p, &v, sizeof v); }                              \
                                                                                                \
    /* radix-2 butterflies, for rows shorter than 8 vectors */                                  \
    static void small_##S(T *x, size_t n) {                                                     \
        for (size_t h = 1; h < n; h <<= 1)                                                      \
            for (size_t i = 0; i < n; i += 2 * h)                                               \
                for (size_t j = i; j < i + h; j++) {                                            \
                    T u = x[j], v = x[j + h];                                                   \
                    x[j] = u + v;                                                               \
                    x[j + h] = u - v;                                                           \
                }                                                                               \
    }                                                                                           \
                                                                                                \
    INLINE void bfly8_##S(T *d, ptrdiff_t ds, const T *s, ptrdiff_t ss, size_t W) {             \
        for (size_t w = 0; w < W; w += VL) {                                                    \
            V a0 = load_##S(s + w), a1 = load_##S(s + ss + w);                                  \
            V a2 = load_##S(s + 2 * ss + w), a3 = load_##S(s + 3 * ss + w);                     \
            V a4 = load_##S(s + 4 * ss + w), a5 = load_##S(s + 5 * ss + w);                     \
            V a6 = load_##S(s + 6 * ss + w), a7 = load_##S(s + 7 * ss + w);                     \
            V b0 = a0 + a1, b1 = a0 - a1, b2 = a2 + a3, b3 = a2 - a3;                           \
            V b4 = a4 + a5, b5 = a4 - a5, b6 = a6 + a7, b7 = a6 - a7;                           \
            a0 = b0 + b2; a2 = b0 - b2; a1 = b1 + b3; a3 = b1 - b3;                             \
            a4 = b4 + b6; a6 = b4 - b6; a5 = b5 + b7; a7 = b5 - b7;                             \
            store_##S(d + w, a0 + a4); store_##S(d + 4 * ds + w, a0 - a4);                      \
            store_##S(d + ds + w, a1 + a5); store_##S(d + 5 * ds + w, a1 - a5);                 \
            store_##S(d + 2 * ds + w, a2 + a6); store_##S(d + 6 * ds + w, a2 - a6);             \
            store_##S(d + 3 * ds + w, a3 + a7); store_##S(d + 7 * ds + w, a3 - a7);             \
        }                                                                                       \
    }                                                                                           \
    INLINE void bfly4_##S(T *d, ptrdiff_t ds, const T *s, ptrdiff_t ss, size_t W) {             \
        for (size_t w = 0; w < W; w += VL) {                                                    \
            V a0 = load_##S(s + w), a1 = load_##S(s + ss + w);                                  \
            V a2 = load_##S(s + 2 * ss + w), a3 = load_##S(s + 3 * ss + w);                     \
            V b0 = a0 + a1, b1 = a0 - a1, b2 = a2 + a3, b3 = a2 - a3;                           \
            store_##S(d + w, b0 + b2); store_##S(d + 2 * ds + w, b0 - b2);                      \
            store_##S(d + ds + w, b1 + b3); store_##S(d + 3 * ds + w, b1 - b3);                 \
        }                                                                                       \
    }                                                                                           \
    INLINE void bfly2_##S(T *d, ptrdiff_t ds, const T *s, ptrdiff_t ss, size_t W) {             \
        for (size_t w = 0; w < W; w += VL) {                                                    \
            V a0 = load_##S(s + w), a1 = load_##S(s + ss + w);                                  \
            store_##S(d + w, a0 + a1); store_##S(d + ds + w, a0 - a1);                          \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* one radix-2^q stage at row stride s of H_{2^p} across R = 2^p rows of W elements */      \
    INLINE void stage_##S(T *dst, ptrdiff_t dp, const T *src, ptrdiff_t sp, size_t R, size_t s, \
                          int q, size_t W) {                                                    \
        for (size_t g = 0; g < R; g += s << q)                                                  \
            for (size_t t = 0; t < s; t++) {                                                    \
                T *d = dst + (ptrdiff_t)(g + t) * dp;                                           \
                const T *r = src + (ptrdiff_t)(g + t) * sp;                                     \
                if (q == 3) bfly8_##S(d, (ptrdiff_t)s * dp, r, (ptrdiff_t)s * sp, W);           \
                else if (q == 2) bfly4_##S(d, (ptrdiff_t)s * dp, r, (ptrdiff_t)s * sp, W);      \
                else bfly2_##S(d, (ptrdiff_t)s * dp, r, (ptrdiff_t)s * sp, W);                  \
            }                                                                                   \
    }                                                                                           \
                                                                                                \
    /* H_{2^p} across 2^p rows of W elements at x + i * pitch, in place.  With more than one    \
     * stage, the first stage writes into buf (rows W apart) and the last one reads from it:    \
     * rows a power-of-two pitch apart would otherwise fight over the same cache sets. */       \
    INLINE void rows_##S(T *x, ptrdiff_t pitch, int p, size_t W, T *buf) {                      \
        size_t R = (size_t)1 << p, s = 1;                                                       \
        if (p <= 3 || buf == NULL) {                                                            \
            for (int left = p; left > 0; left -= 3, s <<= 3)                                    \
                stage_##S(x, pitch, x, pitch, R, s, left >= 3 ? 3 : left, W);                   \
            return;                                                                             \
        }                                                                                       \
        for (int left = p; left > 0;) {                                                         \
            int q = left >= 3 ? 3 : left;                                                       \
            int first = left == p, last = left == q;                                            \
            stage_##S(last ? x : buf, last ? pitch : (ptrdiff_t)W, first ? x : buf,             \
                      first ? pitch : (ptrdiff_t)W, R, s, q, W);                                \
            s <<= q;                                                                            \
            left -= q;                                                                          \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* the same as rows_, but every stage writes into buf (rows W apart), where the result stays */ \
    INLINE void rows_buf_##S(const T *x, ptrdiff_t pitch, int p, size_t W, T *buf) {            \
        size_t R = (size_t)1 << p, s = 1;                                                       \
        for (int left = p; left > 0;) {                                                         \
            int q = left >= 3 ? 3 : left;                                                       \
            int first = left == p;                                                              \
            stage_##S(buf, (ptrdiff_t)W, first ? x : buf, first ? pitch : (ptrdiff_t)W, R, s, q, W); \
            s <<= q;                                                                            \
            left -= q;                                                                          \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* bits [from, log2 len) of a contiguous stretch of len elements, radix-8 passes */         \
    INLINE void low_##S(T *x, size_t len, int from) {                                           \
        int k = ilog2(len);                                                                     \
        for (int a = from; a < k;) {                                                            \
            int p = k - a >= 3 ? 3 : k - a;                                                     \
            size_t pitch = (size_t)1 << a;                                                      \
            for (size_t g = 0; g < len; g += pitch << p)                                        \
                stage_##S(x + g, (ptrdiff_t)pitch, x + g, (ptrdiff_t)pitch, (size_t)1 << p, 1, p, pitch); \
            a += p;                                                                             \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* all bits of contiguous blocks [b0, b1) of len = 2^k >= 8 VL elements each */             \
    MULTIVERSION static void blocks_##S(T *x, size_t len, size_t chunk, size_t b0, size_t b1) { \
        int first = ilog2(8 * VL);                                                              \
        if (chunk > len) chunk = len;                                                           \
        for (size_t b = b0; b < b1; b++) {                                                      \
            T *xb = x + b * len;                                                                \
            for (size_t c = 0; c < len; c += chunk) {                                           \
                T *y = xb + c;                                                                  \
                for (size_t i = 0; i < chunk; i += 8 * VL) {                                    \
                    V a[8];                                                                     \
                    for (int m = 0; m < 8; m++) a[m] = INVEC(load_##S(y + i + m * VL));         \
                    V b0_ = a[0] + a[1], b1_ = a[0] - a[1], b2 = a[2] + a[3], b3 = a[2] - a[3]; \
                    V b4 = a[4] + a[5], b5 = a[4] - a[5], b6 = a[6] + a[7], b7 = a[6] - a[7];   \
                    V c0 = b0_ + b2, c2 = b0_ - b2, c1 = b1_ + b3, c3 = b1_ - b3;               \
                    V c4 = b4 + b6, c6 = b4 - b6, c5 = b5 + b7, c7 = b5 - b7;                   \
                    store_##S(y + i, c0 + c4); store_##S(y + i + 4 * VL, c0 - c4);              \
                    store_##S(y + i + VL, c1 + c5); store_##S(y + i + 5 * VL, c1 - c5);         \
                    store_##S(y + i + 2 * VL, c2 + c6); store_##S(y + i + 6 * VL, c2 - c6);     \
                    store_##S(y + i + 3 * VL, c3 + c7); store_##S(y + i + 7 * VL, c3 - c7);     \
                }                                                                               \
                low_##S(y, chunk, first);                                                       \
            }                                                                                   \
            if (chunk < len) low_##S(xb, len, ilog2(chunk));                                    \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* tiles [t0, t1) of a high pass over one row x: tile t holds 2^p rows at pitch 2^a and W  \
     * columns (1 KiB or more with the default tuning: runs long enough for the prefetchers);   \
     * with a drain hook (the last pass of a fused call) the results go to it, not back to x */ \
    MULTIVERSION static void tiles_##S(T *x, int a, int p, size_t W, size_t t0, size_t t1,      \
                                       const hooks_t *hk) {                                     \
        size_t pitch = (size_t)1 << a, per_group = pitch / W, R = (size_t)1 << p;               \
        int drain = hk != NULL && hk->drain != NULL;                                            \
        T *buf = p > 3 || drain ? (T *)malloc(R * W * sizeof(T)) : NULL; /* NULL: in place */   \
        for (size_t t = t0; t < t1; t++) {                                                      \
            size_t off = (t / per_group) * (pitch << p) + (t % per_group) * W;                  \
            if (!drain) {                                                                       \
                rows_##S(x + off, (ptrdiff_t)pitch, p, W, buf);                                 \
            } else if (buf != NULL) {                                                           \
                rows_buf_##S(x + off, (ptrdiff_t)pitch, p, W, buf);                             \
                for (size_t m = 0; m < R; m++) hk->drain(hk->ctx, buf + m * W, off + m * pitch, W); \
            } else { /* no memory for the buffer: in place, then drained from x */              \
                rows_##S(x + off, (ptrdiff_t)pitch, p, W, NULL);                                \
                for (size_t m = 0; m < R; m++)                                                  \
                    hk->drain(hk->ctx, x + off + m * pitch, off + m * pitch, W);                \
            }                                                                                   \
        }                                                                                       \
        free(buf);                                                                              \
    }

FWHT_KERNELS(float, vf, 8, invec_f, f)
FWHT_KERNELS(double, vd, 4, invec_d, d)

/* ---- the plan and its execution over threads ------------------------------------------- */

typedef struct {
    char *data;
    int is_double;
    size_t rows, n, block, chunk;
    int npass;
    high_pass pass[64];
    const hooks_t *hooks; /* NULL, or (one row) the fill of the first pass and the drain of the last */
} plan_t;

typedef struct {
    size_t block_bytes, chunk_bytes, tile_bytes;
    int high_bits;
} tuning_t;


static void plan_make(plan_t *pl, char *data, int is_double, size_t rows, size_t n, const tuning_t *tu) {
    size_t item = is_double ? sizeof(double) : sizeof(float), vl = 32 / item;
    int k = ilog2(n), done, npass;
    pl->data = data;
    pl->hooks = NULL;
    pl->is_double = is_double;
    pl->rows = rows;
    pl->n = n;
    if (tu->block_bytes) {
        pl->block = tu->block_bytes / item;
    } else { /* auto: the smallest block from BLOCK_BYTES to BLOCK_MAX_BYTES that leaves one high pass */
        size_t bytes = BLOCK_BYTES;
        while (bytes < BLOCK_MAX_BYTES && (n * item) / bytes > ((size_t)1 << tu->high_bits)) bytes <<= 1;
        pl->block = bytes / item;
    }
    if (pl->block > n) pl->block = n;
    pl->chunk = tu->chunk_bytes / item;
    done = ilog2(pl->block);
    npass = (k - done + tu->high_bits - 1) / tu->high_bits;
    pl->npass = npass;
    for (int i = 0; i < npass; i++) { /* near-equal passes: 10 bits as 5 + 5, not 8 + 2 */
        int p = (k - done + (npass - i) - 1) / (npass - i);
        size_t R = (size_t)1 << p, pitch = (size_t)1 << done;
        size_t W = tu->tile_bytes / (R * item); /* columns per tile: the tile fills tile_bytes */
        if (W < vl) W = vl;
        if (W * R * item > TILE_MAX_BYTES) W = TILE_MAX_BYTES / (R * item);
        if (W > pitch) W = pitch;
        pl->pass[i].a = done;
        pl->pass[i].p = p;
        pl->pass[i].W = W;
        pl->pass[i].tiles_per_row = (n >> (done + p)) * (pitch / W);
        done += p;
    }
}

/* units of phase ph: phase 0 = (row, block) pairs, phase i >= 1 = (row, tile) of high pass i - 1 */
static size_t phase_units(const plan_t *pl, int ph) {
    if (ph == 0) return pl->rows * (pl->n / pl->block);
    return pl->rows * pl->pass[ph - 1].tiles_per_row;
}

/* all bits of the blocks [u0, u1) (rows * n / block of them, back to back) */
static void block_units(const plan_t *pl, size_t u0, size_t u1) {
    size_t item = pl->is_double ? sizeof(double) : sizeof(float);
    if (pl->block < 256 / item) { /* shorter than 8 vectors */
        for (size_t u = u0; u < u1; u++) {
            char *x = pl->data + u * pl->block * item;
            if (pl->is_double) small_d((double *)x, pl->block);
            else small_f((float *)x, pl->block);
        }
    } else if (pl->is_double) blocks_d((double *)pl->data, pl->block, pl->chunk, u0, u1);
    else blocks_f((float *)pl->data, pl->block, pl->chunk, u0, u1);
}

static void run_units(const plan_t *pl, int ph, size_t u0, size_t u1) {
    size_t item = pl->is_double ? sizeof(double) : sizeof(float);
    const hooks_t *hk = pl->hooks;
    if (ph == 0) {
        if (hk == NULL) {
            block_units(pl, u0, u1);
            return;
        }
        for (size_t u = u0; u < u1; u++) { /* one row: fill each block, transform it while in cache */
            char *x = pl->data + u * pl->block * item;
            if (hk->fill) hk->fill(hk->ctx, x, u * pl->block, pl->block);
            block_units(pl, u, u + 1);
            if (pl->npass == 0 && hk->drain) hk->drain(hk->ctx, x, u * pl->block, pl->block);
        }
        return;
    }
    const high_pass *hp = &pl->pass[ph - 1];
    const hooks_t *last = ph == pl->npass ? hk : NULL;
    while (u0 < u1) { /* split at row boundaries */
        size_t row = u0 / hp->tiles_per_row, t0 = u0 % hp->tiles_per_row;
        size_t t1 = (row + 1) * hp->tiles_per_row <= u1 ? hp->tiles_per_row : u1 - row * hp->tiles_per_row;
        char *x = pl->data + row * pl->n * item;
        if (pl->is_double) tiles_d((double *)x, hp->a, hp->p, hp->W, t0, t1, last);
        else tiles_f((float *)x, hp->a, hp->p, hp->W, t0, t1, last);
        u0 += t1 - t0;
    }
}

/* ---- threads ------------------------------------------------------------------------------ */

typedef void (*range_fn)(void *ctx, size_t u0, size_t u1);

typedef struct {
    range_fn fn;
    void *ctx;
    size_t u0, u1;
} job_t;

#if FWHT_THREADS
static void *job_main(void *arg) {
    job_t *j = (job_t *)arg;
    j->fn(j->ctx, j->u0, j->u1);
    return NULL;
}
#endif

#define MAX_THREADS 64

/* fn(ctx, u0, u1) over [0, units) in `threads` contiguous shares; the calling thread takes the first */
static void parallel_for(range_fn fn, void *ctx, size_t units, int threads) {
    if ((size_t)threads > units) threads = (int)units;
#if FWHT_THREADS
    if (threads > 1) {
        pthread_t tid[MAX_THREADS];
        job_t job[MAX_THREADS];
        int started[MAX_THREADS];
        for (int i = 0; i < threads; i++) {
            job[i].fn = fn;
            job[i].ctx = ctx;
            job[i].u0 = units * (size_t)i / (size_t)threads;
            job[i].u1 = units * (size_t)(i + 1) / (size_t)threads;
        }
        for (int i = 1; i < threads; i++) started[i] = pthread_create(&tid[i], NULL, job_main, &job[i]) == 0;
        fn(ctx, job[0].u0, job[0].u1);
        for (int i = 1; i < threads; i++) {
            if (started[i]) pthread_join(tid[i], NULL);
            else fn(ctx, job[i].u0, job[i].u1); /* no thread: do its share here */
        }
        return;
    }
#endif
    fn(ctx, 0, units);
}

typedef struct {
    const plan_t *pl;
    int ph;
} phase_t;

static void phase_range(void *ctx, size_t u0, size_t u1) {
    phase_t *p = (phase_t *)ctx;
    run_units(p->pl, p->ph, u0, u1);
}

static void fwht_run(char *data, int is_double, size_t rows, size_t n, int threads, const tuning_t *tu) {
    plan_t pl;
    if (n < 2 || rows == 0) return;
    plan_make(&pl, data, is_double, rows, n, tu);
    for (int ph = 0; ph <= pl.npass; ph++) {
        phase_t p = {&pl, ph};
        parallel_for(phase_range, &p, phase_units(&pl, ph), threads);
    }
}

/* ---- bucketed scatter and gather ------------------------------------------------------------
 *
 * A sparse map with E entries: entry j reads source element src(j) and goes to destination
 * dest(j) of an output of m elements.  Applying it directly touches the destinations in
 * random order (a cache miss per entry once m outgrows the caches).  The plan sorts the
 * entries by dest >> bits, stably (a counting sort): pos[j] is entry j's place in that order
 * and destB[p] the destination of the entry at place p; bucket c holds places
 * [starts[c], starts[c + 1]).  The forward map then runs in two passes that both stay in
 * cache: entries in source order are written to tmp[pos[j]] (one sequential stream per
 * bucket, at most a few hundred), and each bucket of tmp is added into its 2^bits-element
 * stretch of the output.  The transpose runs the same passes backwards.
 *
 * Entries come in `reps` repetitions of `len` sources: j = k * len + i reads source i (or
 * src_index[j] when given); weights[j] multiplies entry j.  Weights that are all +-c (count-
 * sketch, the sparse embedding) may come instead as c and sign bits (bit j % 64 of word
 * j / 64 set: -c): a 32x smaller stream than the weights, and the same products, since
 * v * (-c) = -(v * c) in IEEE arithmetic.
 */

typedef struct {
    const char *src;
    char *out, *tmp;
    const char *w;
    const uint64_t *sgn; /* sign bits of weights +-scale (w is then NULL) */
    double scale;
    const int32_t *pos, *destB, *src_index;
    const int64_t *starts;
    size_t len, reps;
    int acc;
} sg_t;

/* v with its sign bit flipped when bit is 1 (no branch: the signs are random) */
INLINE float flip_f(float v, uint64_t bit) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u ^= (uint32_t)bit << 31;
    memcpy(&v, &u, sizeof v);
    return v;
}

INLINE double flip_d(double v, uint64_t bit) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    u ^= bit << 63;
    memcpy(&v, &u, sizeof v);
    return v;
}

#define SG_KERNELS(T, S)                                                                         \
    /* v times the weight of entry j */                                                         \
    INLINE T weigh_##S(const sg_t *g, T v, size_t j) {                                          \
        if (g->sgn) return flip_##S(v * (T)g->scale, (g->sgn[j >> 6] >> (j & 63)) & 1);         \
        return g->w ? v * ((const T *)g->w)[j] : v;                                             \
    }                                                                                           \
    static void fw_spread_##S(void *ctx, size_t i0, size_t i1) {                                \
        const sg_t *g = (const sg_t *)ctx;                                                      \
        const T *src = (const T *)g->src;                                                       \
        T *tmp = (T *)g->tmp;                                                                   \
        for (size_t k = 0; k < g->reps; k++) {                                                  \
            size_t o = k * g->len;                                                              \
            for (size_t i = i0; i < i1; i++) {                                                  \
                size_t j = o + i;                                                               \
                T v = g->src_index ? src[g->src_index[j]] : src[i];                             \
                tmp[g->pos[j]] = weigh_##S(g, v, j);                                            \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    static void fw_collect_##S(void *ctx, size_t c0, size_t c1) {                               \
        const sg_t *g = (const sg_t *)ctx;                                                      \
        const T *tmp = (const T *)g->tmp;                                                       \
        T *out = (T *)g->out;                                                                   \
        size_t p1 = (size_t)g->starts[c1];                                                      \
        if (g->acc)                                                                             \
            for (size_t p = (size_t)g->starts[c0]; p < p1; p++) out[g->destB[p]] += tmp[p];     \
        else                                                                                    \
            for (size_t p = (size_t)g->starts[c0]; p < p1; p++) out[g->destB[p]] = tmp[p];      \
    }                                                                                           \
    static void bw_fetch_##S(void *ctx, size_t c0, size_t c1) {                                 \
        const sg_t *g = (const sg_t *)ctx;                                                      \
        const T *u = (const T *)g->src;                                                         \
        T *tmp = (T *)g->tmp;                                                                   \
        size_t p1 = (size_t)g->starts[c1];                                                      \
        for (size_t p = (size_t)g->starts[c0]; p < p1; p++) tmp[p] = u[g->destB[p]];            \
    }                                                                                           \
    static void bw_reduce_##S(void *ctx, size_t i0, size_t i1) {                                \
        const sg_t *g = (const sg_t *)ctx;                                                      \
        const T *tmp = (const T *)g->tmp;                                                       \
        T *out = (T *)g->out;                                                                   \
        for (size_t k = 0; k < g->reps; k++) {                                                  \
            size_t o = k * g->len;                                                              \
            for (size_t i = i0; i < i1; i++) {                                                  \
                size_t j = o + i;                                                               \
                T v = weigh_##S(g, tmp[g->pos[j]], j);                                          \
                if (g->src_index) out[g->src_index[j]] = v;                                     \
                else if (k == 0) out[i] = v;                                                    \
                else out[i] += v;                                                               \
            }                                                                                   \
        }                                                                                       \
    }

SG_KERNELS(float, f)
SG_KERNELS(double, d)

/* ---- the SRHT, fused ------------------------------------------------------------------------
 *
 * R v = S H (D v, zero-padded to n) and R^T u = D (H S^T u)[:d], with the scale folded into D's
 * diagonal ds.  S keeps b of the n rows: a bit mask over [0, n) with, per 64-bit word, the
 * number of kept rows before it (rank), so the k-th kept row in increasing order is entry k of a
 * bucket plan (pos, destB, starts, above) that sends it to its place in y.  One call is one
 * transform of a work row with hooks: R v fills the blocks with ds * v (zeros past d) and
 * drains the last pass straight into the plan's bucket-ordered tmp, which one pass then spreads
 * over y; R^T u first gathers u into tmp, fills the blocks with zeros and the kept rows, and
 * drains ds * (H z)[:d] into the output.  Neither the padded vector nor H z is written to memory
 * between passes more than the two passes of the transform need.
 */

typedef struct {
    const char *src; /* R v: v (d entries) */
    char *out;       /* R^T u: the output (d entries) */
    const char *ds;  /* the diagonal of D times the scale (d entries) */
    char *tmp;       /* b values in bucket order */
    const uint64_t *mask;
    const int32_t *rank, *pos;
    size_t d;
} srht_t;

INLINE uint64_t low_bits(size_t k) { return k >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << k) - 1); }

/* BODY for every kept row of [off, off + len), in increasing order: i its place in the stretch
 * (row off + i), j its rank among the kept rows */
#define FOR_KEPT(c, off, len, BODY)                                                              \
    do {                                                                                        \
        size_t end_ = (off) + (len), w_ = (off) >> 6;                                           \
        size_t j = (size_t)(c)->rank[w_] + (size_t)__builtin_popcountll((c)->mask[w_] & low_bits((off) & 63)); \
        for (; (w_ << 6) < end_; w_++) {                                                        \
            uint64_t m_ = (c)->mask[w_];                                                        \
            if ((w_ << 6) < (off)) m_ &= ~low_bits((off) & 63);                                 \
            if ((w_ << 6) + 64 > end_) m_ &= low_bits(end_ - (w_ << 6));                        \
            while (m_) {                                                                        \
                size_t i = (w_ << 6) + (size_t)__builtin_ctzll(m_) - (off);                     \
                BODY;                                                                           \
                j++;                                                                            \
                m_ &= m_ - 1;                                                                   \
            }                                                                                   \
        }                                                                                       \
    } while (0)

/* entries of [off, off + len) below d */
INLINE size_t below_d(const srht_t *c, size_t off, size_t len) {
    return off >= c->d ? 0 : (c->d - off < len ? c->d - off : len);
}

#define SRHT_HOOKS(T, S)                                                                         \
    static void fill_scale_##S(const void *ctx, void *dst_, size_t off, size_t len) {           \
        const srht_t *c = (const srht_t *)ctx;                                                  \
        T *dst = (T *)dst_;                                                                     \
        const T *v = (const T *)c->src + off, *ds = (const T *)c->ds + off;                     \
        size_t m = below_d(c, off, len);                                                        \
        for (size_t i = 0; i < m; i++) dst[i] = v[i] * ds[i];                                   \
        if (m < len) memset(dst + m, 0, (len - m) * sizeof(T));                                 \
    }                                                                                           \
    static void drain_kept_##S(const void *ctx, const void *src_, size_t off, size_t len) {     \
        const srht_t *c = (const srht_t *)ctx;                                                  \
        const T *src = (const T *)src_;                                                         \
        T *tmp = (T *)c->tmp;                                                                   \
        FOR_KEPT(c, off, len, tmp[c->pos[j]] = src[i]);                                         \
    }                                                                                           \
    static void fill_kept_##S(const void *ctx, void *dst_, size_t off, size_t len) {            \
        const srht_t *c = (const srht_t *)ctx;                                                  \
        T *dst = (T *)dst_;                                                                     \
        const T *tmp = (const T *)c->tmp;                                                       \
        memset(dst, 0, len * sizeof(T));                                                        \
        FOR_KEPT(c, off, len, dst[i] = tmp[c->pos[j]]);                                         \
    }                                                                                           \
    static void drain_scale_##S(const void *ctx, const void *src_, size_t off, size_t len) {    \
        const srht_t *c = (const srht_t *)ctx;                                                  \
        const T *src = (const T *)src_, *ds = (const T *)c->ds + off;                           \
        T *w = (T *)c->out + off;                                                               \
        size_t m = below_d(c, off, len);                                                        \
        for (size_t i = 0; i < m; i++) w[i] = src[i] * ds[i];                                   \
    }

SRHT_HOOKS(float, f)
SRHT_HOOKS(double, d)

/* one row: R v (forward) or R^T u, with g the bucket plan of S over tmp and c the hooks' data */
static void srht_row(int forward, int is_double, const srht_t *c, sg_t *g, char *work, size_t n, size_t nbk,
                     int threads) {
    tuning_t tu = {0, CHUNK_BYTES, TILE_BYTES, HIGH_BITS};
    plan_t pl;
    hooks_t hk;
    plan_make(&pl, work, is_double, 1, n, &tu);
    hk.ctx = c;
    if (forward) {
        hk.fill = is_double ? fill_scale_d : fill_scale_f;
        hk.drain = is_double ? drain_kept_d : drain_kept_f;
    } else {
        parallel_for(is_double ? bw_fetch_d : bw_fetch_f, g, nbk, threads); /* tmp <- u, bucket order */
        hk.fill = is_double ? fill_kept_d : fill_kept_f;
        hk.drain = is_double ? drain_scale_d : drain_scale_f;
    }
    pl.hooks = &hk;
    for (int ph = 0; ph <= pl.npass; ph++) {
        phase_t p = {&pl, ph};
        parallel_for(phase_range, &p, phase_units(&pl, ph), threads);
    }
    if (forward) parallel_for(is_double ? fw_collect_d : fw_collect_f, g, nbk, threads); /* y <- tmp */
}

/* ---- Python binding -------------------------------------------------------------------- */

/* A C-contiguous buffer of kind 'f' (floating) or 'i' (signed integer) and the given item size. */
static int get_buf(PyObject *obj, Py_buffer *view, int writable, char kind, Py_ssize_t itemsize, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@') fmt++;
    int ok = view->itemsize == itemsize && fmt[0] != '\0' && fmt[1] == '\0' &&
             (kind == 'f' ? (fmt[0] == 'f' || fmt[0] == 'd') : strchr("bhilq", fmt[0]) != NULL);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous %s%zd buffer, got format '%s' of %zd bytes", what,
                     kind == 'f' ? "float" : "int", itemsize * 8, view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static Py_ssize_t count_of(const Py_buffer *v) { return v->len / v->itemsize; }

static PyObject *py_transform(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"buffer", "n", "threads", "block_bytes", "chunk_bytes", "tile_bytes", "high_bits", NULL};
    PyObject *obj;
    Py_ssize_t n, block_bytes = 0, chunk_bytes = CHUNK_BYTES, tile_bytes = TILE_BYTES;
    int threads = 1, high_bits = HIGH_BITS;
    tuning_t tu;
    Py_buffer view;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On|i$nnni:transform", kw, &obj, &n, &threads, &block_bytes,
                                     &chunk_bytes, &tile_bytes, &high_bits))
        return NULL;
    if ((block_bytes != 0 && (block_bytes < 256 || (block_bytes & (block_bytes - 1)))) || chunk_bytes < 256 ||
        (chunk_bytes & (chunk_bytes - 1)) || tile_bytes < 32 || tile_bytes > TILE_MAX_BYTES ||
        (tile_bytes & (tile_bytes - 1)) || high_bits < 1 || high_bits > 12) {
        PyErr_SetString(PyExc_ValueError, "fwht tuning out of range: block_bytes (0: auto), chunk_bytes powers of two >= 256, "
                                          "tile_bytes a power of two in [32, 2^21], high_bits in [1, 12]");
        return NULL;
    }
    tu.block_bytes = (size_t)block_bytes;
    tu.chunk_bytes = (size_t)chunk_bytes;
    tu.tile_bytes = (size_t)tile_bytes;
    tu.high_bits = high_bits;
    if (n < 1 || (n & (n - 1))) {
        PyErr_Format(PyExc_ValueError, "fwht needs a power-of-two length, got %zd", n);
        return NULL;
    }
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) return NULL;
    const char *fmt = view.format ? view.format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@') fmt++;
    int is_double = strcmp(fmt, "d") == 0 && view.itemsize == 8;
    int is_float = strcmp(fmt, "f") == 0 && view.itemsize == 4;
    if (!is_double && !is_float) {
        PyErr_Format(PyExc_TypeError, "fwht works on float32 or float64 buffers, got format '%s'",
                     view.format ? view.format : "B");
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t count = count_of(&view);
    if (count % n) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "buffer of %zd elements is not a whole number of rows of %zd", count, n);
        return NULL;
    }
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    Py_BEGIN_ALLOW_THREADS
    fwht_run((char *)view.buf, is_double, (size_t)(count / n), (size_t)n, threads, &tu);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *py_bucket_plan(PyObject *self, PyObject *args) {
    PyObject *o_dest, *o_pos, *o_destB, *o_starts;
    Py_ssize_t m;
    int bits;
    Py_buffer dest, pos, destB, starts;
    (void)self;
    if (!PyArg_ParseTuple(args, "OniOOO:bucket_plan", &o_dest, &m, &bits, &o_pos, &o_destB, &o_starts)) return NULL;
    if (m < 1 || m > INT32_MAX || bits < 0 || bits > 30) {
        PyErr_SetString(PyExc_ValueError, "bucket_plan: need 1 <= m <= 2^31 - 1 and 0 <= bits <= 30");
        return NULL;
    }
    if (get_buf(o_dest, &dest, 0, 'i', 4, "dest") < 0) return NULL;
    if (get_buf(o_pos, &pos, 1, 'i', 4, "pos") < 0) { PyBuffer_Release(&dest); return NULL; }
    if (get_buf(o_destB, &destB, 1, 'i', 4, "destB") < 0) {
        PyBuffer_Release(&dest); PyBuffer_Release(&pos); return NULL;
    }
    if (get_buf(o_starts, &starts, 1, 'i', 8, "starts") < 0) {
        PyBuffer_Release(&dest); PyBuffer_Release(&pos); PyBuffer_Release(&destB); return NULL;
    }
    size_t E = (size_t)count_of(&dest), nb = (((size_t)m - 1) >> bits) + 1;
    const char *err = NULL;
    if ((size_t)count_of(&pos) != E || (size_t)count_of(&destB) != E || (size_t)count_of(&starts) != nb + 1)
        err = "bucket_plan: pos and destB need len(dest) entries, starts ((m - 1) >> bits) + 2";
    else if (E > (size_t)INT32_MAX)
        err = "bucket_plan: more than 2^31 - 1 entries";
    if (err == NULL) {
        const int32_t *d = (const int32_t *)dest.buf;
        int32_t *ps = (int32_t *)pos.buf, *db = (int32_t *)destB.buf;
        int64_t *st = (int64_t *)starts.buf;
        Py_BEGIN_ALLOW_THREADS
        memset(st, 0, (nb + 1) * sizeof(int64_t));
        for (size_t j = 0; j < E; j++) {
            if (d[j] < 0 || d[j] >= m) { err = "bucket_plan: a destination is outside [0, m)"; break; }
            st[((size_t)d[j] >> bits) + 1]++;
        }
        if (err == NULL) {
            for (size_t c = 0; c < nb; c++) st[c + 1] += st[c];
            /* st[c] is now the first free place of bucket c; walk the entries in order (stable) */
            for (size_t j = 0; j < E; j++) {
                size_t c = (size_t)d[j] >> bits;
                int64_t p = st[c]++;
                ps[j] = (int32_t)p;
                db[p] = d[j];
            }
            for (size_t c = nb; c > 0; c--) st[c] = st[c - 1]; /* back to bucket starts */
            st[0] = 0;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&dest); PyBuffer_Release(&pos); PyBuffer_Release(&destB); PyBuffer_Release(&starts);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* scatter(src, src_len, out, m, pos, destB, starts, tmp, reps, weights, src_index, accumulate, threads[, signs,
 * scale]) and gather(u, m, out, out_len, pos, destB, starts, tmp, reps, weights, src_index, threads[, signs,
 * scale]): rows of src/u and out are matched one to one; signs (int64 words) and scale replace weights. */
static PyObject *sg_call(PyObject *args, int forward) {
    PyObject *o_src, *o_out, *o_pos, *o_destB, *o_starts, *o_tmp, *o_w, *o_idx, *o_sgn = Py_None;
    Py_ssize_t src_len, out_len, reps;
    int acc = 0, threads = 1;
    double scale = 1.0;
    if (forward) {
        if (!PyArg_ParseTuple(args, "OnOnOOOOnOOpi|Od:scatter", &o_src, &src_len, &o_out, &out_len, &o_pos, &o_destB,
                              &o_starts, &o_tmp, &reps, &o_w, &o_idx, &acc, &threads, &o_sgn, &scale))
            return NULL;
    } else if (!PyArg_ParseTuple(args, "OnOnOOOOnOOi|Od:gather", &o_src, &src_len, &o_out, &out_len, &o_pos, &o_destB,
                                 &o_starts, &o_tmp, &reps, &o_w, &o_idx, &threads, &o_sgn, &scale))
        return NULL;
    Py_buffer b[9];
    int nb_ = 0, failed = 0;
    PyObject *objs[9] = {o_src, o_out, o_pos, o_destB, o_starts, o_tmp, o_w, o_idx, o_sgn};
    const char kinds[9] = {'f', 'f', 'i', 'i', 'i', 'f', 'f', 'i', 'i'};
    Py_ssize_t sizes[9] = {0, 0, 4, 4, 8, 0, 0, 4, 8};
    const char *names[9] = {"src", "out", "pos", "destB", "starts", "tmp", "weights", "src_index", "signs"};
    Py_buffer probe;
    if (get_buf(o_src, &probe, 0, 'f', 4, "src") == 0) sizes[0] = 4;
    else {
        PyErr_Clear();
        if (get_buf(o_src, &probe, 0, 'f', 8, "src") < 0) return NULL;
        sizes[0] = 8;
    }
    PyBuffer_Release(&probe);
    sizes[1] = sizes[5] = sizes[6] = sizes[0];
    for (int i = 0; i < 9; i++) {
        if (i >= 6 && objs[i] == Py_None) { b[i].buf = NULL; continue; }
        if (get_buf(objs[i], &b[i], i == 1 || i == 5, kinds[i], sizes[i], names[i]) < 0) { failed = 1; break; }
        nb_ = i + 1;
    }
    const char *err = NULL;
    if (!failed) {
        size_t E = (size_t)count_of(&b[2]);
        size_t nbk = (size_t)count_of(&b[4]) - 1;
        size_t src_count = (size_t)count_of(&b[0]), out_count = (size_t)count_of(&b[1]);
        int has_idx = b[7].buf != NULL;
        if (reps < 1 || E % (size_t)reps) err = "scatter/gather: len(pos) must be a multiple of reps";
        else if ((size_t)count_of(&b[3]) != E || (size_t)count_of(&b[5]) < E)
            err = "scatter/gather: destB needs len(pos) entries and tmp at least as many";
        else if (b[6].buf && (size_t)count_of(&b[6]) != E) err = "scatter/gather: weights need len(pos) entries";
        else if (b[8].buf && (b[6].buf || (size_t)count_of(&b[8]) != (E + 63) / 64))
            err = "scatter/gather: signs need (len(pos) + 63) / 64 words, and no weights beside them";
        else if (has_idx && ((size_t)count_of(&b[7]) != E || reps != 1))
            err = "scatter/gather: src_index needs len(pos) entries and reps = 1";
        else if (src_len < 1 || out_len < 1 || src_count % (size_t)src_len || out_count % (size_t)out_len ||
                 src_count / (size_t)src_len != out_count / (size_t)out_len)
            err = "scatter/gather: src and out must hold the same number of rows";
        else {
            size_t len = E / (size_t)reps;
            size_t m = forward ? (size_t)out_len : (size_t)src_len, srcw = forward ? (size_t)src_len : (size_t)out_len;
            if (!has_idx && srcw != len) err = "scatter/gather: without src_index a source row has len(pos) / reps entries";
            else if (nbk < 1 || (size_t)((const int64_t *)b[4].buf)[nbk] != E)
                err = "scatter/gather: starts does not match pos";
            else {
                size_t rows = src_count / (size_t)src_len, isz = (size_t)sizes[0];
                (void)m;
                if (threads < 1) threads = 1;
                if (threads > MAX_THREADS) threads = MAX_THREADS;
                Py_BEGIN_ALLOW_THREADS
                for (size_t r = 0; r < rows; r++) {
                    sg_t g;
                    g.src = (const char *)b[0].buf + r * (size_t)src_len * isz;
                    g.out = (char *)b[1].buf + r * (size_t)out_len * isz;
                    g.tmp = (char *)b[5].buf;
                    g.w = (const char *)b[6].buf;
                    g.sgn = (const uint64_t *)b[8].buf;
                    g.scale = scale;
                    g.pos = (const int32_t *)b[2].buf;
                    g.destB = (const int32_t *)b[3].buf;
                    g.src_index = (const int32_t *)b[7].buf;
                    g.starts = (const int64_t *)b[4].buf;
                    g.len = len;
                    g.reps = (size_t)reps;
                    g.acc = acc;
                    if (forward) {
                        parallel_for(isz == 8 ? fw_spread_d : fw_spread_f, &g, len, threads);
                        parallel_for(isz == 8 ? fw_collect_d : fw_collect_f, &g, nbk, threads);
                    } else {
                        parallel_for(isz == 8 ? bw_fetch_d : bw_fetch_f, &g, nbk, threads);
                        parallel_for(isz == 8 ? bw_reduce_d : bw_reduce_f, &g, len, threads);
                    }
                }
                Py_END_ALLOW_THREADS
            }
        }
    }
    for (int i = 0; i < nb_; i++)
        if (b[i].buf != NULL || i < 6) PyBuffer_Release(&b[i]);
    if (failed) return NULL;
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* srht(forward, src, out, work, tmp, ds, d, mask, rank, pos, destB, starts, threads): rows of src and out
 * matched one to one; work holds n entries, tmp at least b = len(pos). */
static PyObject *py_srht(PyObject *self, PyObject *args) {
    int forward, threads;
    Py_ssize_t d;
    PyObject *o[11];
    (void)self;
    if (!PyArg_ParseTuple(args, "pOOOOOnOOOOOi:srht", &forward, &o[0], &o[1], &o[2], &o[3], &o[4], &d, &o[5], &o[6],
                          &o[7], &o[8], &o[9], &threads))
        return NULL;
    /* src, out, work, tmp, ds, mask, rank, pos, destB, starts */
    PyObject *objs[10] = {o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[9]};
    const char kinds[10] = {'f', 'f', 'f', 'f', 'f', 'i', 'i', 'i', 'i', 'i'};
    Py_ssize_t sizes[10] = {0, 0, 0, 0, 0, 8, 4, 4, 4, 8};
    const char *names[10] = {"src", "out", "work", "tmp", "ds", "mask", "rank", "pos", "destB", "starts"};
    Py_buffer b[10], probe;
    int got = 0, failed = 0;
    if (get_buf(o[2], &probe, 1, 'f', 4, "work") == 0) sizes[0] = 4;
    else {
        PyErr_Clear();
        if (get_buf(o[2], &probe, 1, 'f', 8, "work") < 0) return NULL;
        sizes[0] = 8;
    }
    PyBuffer_Release(&probe);
    for (int i = 1; i < 5; i++) sizes[i] = sizes[0];
    for (int i = 0; i < 10; i++) {
        if (get_buf(objs[i], &b[i], i == 1 || i == 2 || i == 3, kinds[i], sizes[i], names[i]) < 0) { failed = 1; break; }
        got = i + 1;
    }
    const char *err = NULL;
    if (!failed) {
        size_t n = (size_t)count_of(&b[2]), B = (size_t)count_of(&b[7]), words = (n + 63) / 64;
        size_t nbk = (size_t)count_of(&b[9]) - 1, isz = (size_t)sizes[0];
        size_t in_len = forward ? (size_t)d : B, out_len = forward ? B : (size_t)d;
        size_t rows = in_len ? (size_t)count_of(&b[0]) / in_len : 0;
        const uint64_t *mask = (const uint64_t *)b[5].buf;
        const int32_t *rank = (const int32_t *)b[6].buf;
        if (n < 1 || (n & (n - 1))) err = "srht: work must hold a power-of-two number of entries";
        else if (d < 1 || (size_t)d > n || B < 1 || B > n) err = "srht: need 1 <= d <= n and 1 <= b <= n";
        else if ((size_t)count_of(&b[0]) != rows * in_len || (size_t)count_of(&b[1]) != rows * out_len)
            err = "srht: src and out must hold the same number of rows (d entries on one side, b on the other)";
        else if ((size_t)count_of(&b[3]) < B || (size_t)count_of(&b[4]) != (size_t)d || (size_t)count_of(&b[8]) != B)
            err = "srht: tmp needs at least b entries, ds d, destB b";
        else if ((size_t)count_of(&b[5]) != words || (size_t)count_of(&b[6]) != words)
            err = "srht: mask and rank need (n + 63) / 64 entries";
        else if (nbk < 1 || (size_t)((const int64_t *)b[9].buf)[nbk] != B)
            err = "srht: starts does not match pos";
        else {
            size_t kept = 0;
            for (size_t w = 0; w < words && err == NULL; w++) {
                if ((size_t)rank[w] != kept) err = "srht: rank does not count the mask";
                kept += (size_t)__builtin_popcountll(mask[w]);
            }
            if (err == NULL && (kept != B || (n % 64 && mask[words - 1] >> (n % 64))))
                err = "srht: the mask must keep b rows below n";
        }
        if (err == NULL && rows) {
            if (threads < 1) threads = 1;
            if (threads > MAX_THREADS) threads = MAX_THREADS;
            Py_BEGIN_ALLOW_THREADS
            for (size_t r = 0; r < rows; r++) {
                srht_t c;
                sg_t g;
                c.src = (const char *)b[0].buf + r * in_len * isz;
                c.out = (char *)b[1].buf + r * out_len * isz;
                c.ds = (const char *)b[4].buf;
                c.tmp = (char *)b[3].buf;
                c.mask = mask;
                c.rank = rank;
                c.pos = (const int32_t *)b[7].buf;
                c.d = (size_t)d;
                g.src = c.src; /* R^T u: u */
                g.out = c.out; /* R v: y */
                g.tmp = c.tmp;
                g.w = NULL;
                g.sgn = NULL;
                g.scale = 1.0;
                g.pos = c.pos;
                g.destB = (const int32_t *)b[8].buf;
                g.src_index = NULL;
                g.starts = (const int64_t *)b[9].buf;
                g.len = B;
                g.reps = 1;
                g.acc = 0;
                srht_row(forward, isz == 8, &c, &g, (char *)b[2].buf, n, nbk, threads);
            }
            Py_END_ALLOW_THREADS
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    if (failed) return NULL;
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_scatter(PyObject *self, PyObject *args) { (void)self; return sg_call(args, 1); }
static PyObject *py_gather(PyObject *self, PyObject *args) { (void)self; return sg_call(args, 0); }

static PyMethodDef methods[] = {
    {"transform", (PyCFunction)(void (*)(void))py_transform, METH_VARARGS | METH_KEYWORDS,
     "transform(buffer, n, threads=1, *, block_bytes=0, chunk_bytes, tile_bytes, high_bits): in place, every row "
     "of n entries of a C-contiguous float32/float64 buffer becomes H_n times itself (unnormalised Walsh-Hadamard, "
     "Sylvester order); the keywords tune the pass structure (block_bytes=0: chosen from n)."},
    {"srht", py_srht, METH_VARARGS,
     "srht(forward, src, out, work, tmp, ds, d, mask, rank, pos, destB, starts, threads): every row of src "
     "becomes R v = S H (ds * v, zero-padded to n = len(work)) (forward) or R^T u = ds * (H S^T u)[:d], S given "
     "by a kept-row mask over [0, n) (int64 words, rank = kept rows before each word) and a covering bucket "
     "plan from the kept rows, in increasing order, to their places in y; work and tmp are scratch."},
    {"bucket_plan", py_bucket_plan, METH_VARARGS,
     "bucket_plan(dest, m, bits, pos, destB, starts): stable counting sort of int32 destinations by dest >> bits "
     "into pos (int32), destB (int32) and bucket starts (int64, ((m - 1) >> bits) + 2 entries)."},
    {"scatter", py_scatter, METH_VARARGS,
     "scatter(src, src_len, out, m, pos, destB, starts, tmp, reps, weights, src_index, accumulate, threads[, signs, "
     "scale]): out[dest(j)] (+)= weights[j] * src[src(j)] for every entry of a bucket plan, row by row (weights "
     "+-scale given as sign bits: signs, with weights None)."},
    {"gather", py_gather, METH_VARARGS,
     "gather(u, m, out, out_len, pos, destB, starts, tmp, reps, weights, src_index, threads[, signs, scale]): the "
     "transpose of scatter: out[src(j)] (+)= weights[j] * u[dest(j)] (repetitions summed; with src_index, assigned)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Compiled kernels of the sketches: the fast Walsh-Hadamard transform and "
                                    "cache-bucketed scatter/gather.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) {
    return PyModule_Create(&module);
}
