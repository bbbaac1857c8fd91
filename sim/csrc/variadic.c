/* The module API's variadic entry points, for the simulator's in-memory
 * server (sim/src/host): stable Rust cannot define a C variadic function,
 * so these unpack the arguments by their format into arrays and hand them
 * to the non-variadic Rust functions below. Formats: the ones the module
 * uses and the server documents (s: a module string, b: a buffer and its
 * length, c: a C string, l: a long long, v: an array of module strings and
 * its length); other characters are call flags (!, C, S, 0, E, M, 3, ...). */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#define SIM_MAX_ARGS 64

typedef struct {
    int n;
    const char *ptr[SIM_MAX_ARGS];
    size_t len[SIM_MAX_ARGS];
    char num[SIM_MAX_ARGS][24];
} sim_args;

/* Rust: the bytes of a module string. */
extern const char *sim_string_ptr_len(void *str, size_t *len);
extern int sim_replicate_argv(void *ctx, const char *cmd, const sim_args *args);
extern void *sim_call_argv(void *ctx, const char *cmd, const char *fmt, const sim_args *args);
extern void sim_emit_aof_argv(void *io, const char *cmd, const sim_args *args);
extern void sim_log_line(const char *level, const char *line);

static void sim_push(sim_args *a, const char *p, size_t len) {
    if (a->n < SIM_MAX_ARGS) {
        a->ptr[a->n] = p;
        a->len[a->n] = len;
        a->n++;
    }
}

static void sim_unpack(sim_args *a, const char *fmt, va_list ap) {
    a->n = 0;
    for (const char *f = fmt; *f; f++) {
        switch (*f) {
        case 's': {
            void *s = va_arg(ap, void *);
            size_t len = 0;
            const char *p = sim_string_ptr_len(s, &len);
            sim_push(a, p, len);
            break;
        }
        case 'b': {
            const char *p = va_arg(ap, const char *);
            size_t len = va_arg(ap, size_t);
            sim_push(a, p, len);
            break;
        }
        case 'c': {
            const char *p = va_arg(ap, const char *);
            size_t len = 0;
            while (p[len]) len++;
            sim_push(a, p, len);
            break;
        }
        case 'l': {
            long long v = va_arg(ap, long long);
            if (a->n < SIM_MAX_ARGS) {
                int k = snprintf(a->num[a->n], sizeof a->num[a->n], "%lld", v);
                sim_push(a, a->num[a->n], (size_t)(k < 0 ? 0 : k));
            }
            break;
        }
        case 'v': {
            void **v = va_arg(ap, void **);
            size_t n = va_arg(ap, size_t);
            for (size_t i = 0; i < n; i++) {
                size_t len = 0;
                const char *p = sim_string_ptr_len(v[i], &len);
                sim_push(a, p, len);
            }
            break;
        }
        default:
            break;
        }
    }
}

int sim_Replicate(void *ctx, const char *cmd, const char *fmt, ...) {
    sim_args a;
    va_list ap;
    va_start(ap, fmt);
    sim_unpack(&a, fmt, ap);
    va_end(ap);
    return sim_replicate_argv(ctx, cmd, &a);
}

void *sim_Call(void *ctx, const char *cmd, const char *fmt, ...) {
    sim_args a;
    va_list ap;
    va_start(ap, fmt);
    sim_unpack(&a, fmt, ap);
    va_end(ap);
    return sim_call_argv(ctx, cmd, fmt, &a);
}

void sim_EmitAOF(void *io, const char *cmd, const char *fmt, ...) {
    sim_args a;
    va_list ap;
    va_start(ap, fmt);
    sim_unpack(&a, fmt, ap);
    va_end(ap);
    sim_emit_aof_argv(io, cmd, &a);
}

void sim_Log(void *ctx, const char *level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    (void)ctx;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sim_log_line(level, line);
}

void sim_LogIOError(void *io, const char *level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    (void)io;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sim_log_line(level, line);
}
