/*
 * A qemu-user TCG plugin that counts the guest instructions a program executes (Debian's
 * qemu-user is built with plugin support but ships no plugins, and no qemu-plugin.h: the few
 * declarations of the plugin API that this file needs are written out below, as QEMU 7.2
 * documents them, API version 1).
 *
 *   gcc -shared -fPIC -O2 -o libinsn.so insn.c
 *   qemu-aarch64 -plugin ./libinsn.so -d plugin -D insn.log PROGRAM ...
 *
 * Prints "insns: N" through qemu's plugin log at exit. Each translated block adds its
 * instruction count inline when it runs (one counter: run the program on one thread, or the
 * count of concurrent threads may lose additions).
 */
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

extern void qemu_plugin_register_vcpu_tb_trans_cb(
    qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb));
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb,
                                                     enum qemu_plugin_op op, void *ptr,
                                                     uint64_t imm);
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t id, void *userdata),
                                           void *userdata);
extern void qemu_plugin_outs(const char *string);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t insns;

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &insns,
                                             qemu_plugin_tb_n_insns(tb));
}

static void at_exit(qemu_plugin_id_t id, void *userdata) {
    (void)id;
    (void)userdata;
    char line[64];
    snprintf(line, sizeof line, "insns: %llu\n", (unsigned long long)insns);
    qemu_plugin_outs(line);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const qemu_info_t *info,
                                                               int argc, char **argv) {
    (void)info;
    (void)argc;
    (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
