//! Writes what the image is built for into $OUT_DIR: `config.rs` (the model's bytes by
//! include_bytes!, the prompt, the token count, the static region's size) and `link.x` (the
//! memory map, with the static region reserved after the stack).
//!
//! Set by tools/bare-metal.sh:
//!   SMOLRUN_BM_MODEL      path of the GGUF file put in the image (required)
//!   SMOLRUN_BM_PROMPT     the prompt (required)
//!   SMOLRUN_BM_N          tokens to generate (default 32)
//!   SMOLRUN_BM_MEMORY_MB  the static region: the loader's heap and the run's arena (default 64)
//!   SMOLRUN_BM_KERNELS    "native" (default: from the ID registers) or "scalar" (the reference,
//!                         as SMOLRUN_KERNELS=scalar makes the hosted CLI run)

use std::env;
use std::fs;
use std::path::PathBuf;

/// Where qemu -M virt's RAM starts, plus room qemu keeps for the device tree at its bottom.
const LOAD_ADDRESS: u64 = 0x4008_0000;
const STACK_BYTES: u64 = 8 << 20;

fn main() {
    for var in [
        "SMOLRUN_BM_MODEL",
        "SMOLRUN_BM_PROMPT",
        "SMOLRUN_BM_N",
        "SMOLRUN_BM_MEMORY_MB",
        "SMOLRUN_BM_KERNELS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let model = env::var("SMOLRUN_BM_MODEL").unwrap_or_else(|_| {
        panic!("SMOLRUN_BM_MODEL is not set: build with tools/bare-metal.sh MODEL PROMPT N")
    });
    let model =
        fs::canonicalize(&model).unwrap_or_else(|e| panic!("SMOLRUN_BM_MODEL={model}: {e}"));
    println!("cargo:rerun-if-changed={}", model.display());
    let prompt = env::var("SMOLRUN_BM_PROMPT").expect("SMOLRUN_BM_PROMPT is not set");
    let n: usize = env::var("SMOLRUN_BM_N")
        .unwrap_or_else(|_| "32".into())
        .parse()
        .expect("SMOLRUN_BM_N is not a number");
    let memory_mb: u64 = env::var("SMOLRUN_BM_MEMORY_MB")
        .unwrap_or_else(|_| "64".into())
        .parse()
        .expect("SMOLRUN_BM_MEMORY_MB is not a number");
    let scalar = match env::var("SMOLRUN_BM_KERNELS").as_deref() {
        Ok("scalar") => true,
        Ok("native") | Err(_) => false,
        Ok(other) => panic!("SMOLRUN_BM_KERNELS={other}: expected native or scalar"),
    };
    let config = format!(
        "/// The model file, in the image (include_bytes!), page-aligned.\n\
         pub static MODEL: &Aligned<[u8]> = &Aligned(*include_bytes!({model:?}));\n\
         pub const MODEL_NAME: &str = {name:?};\n\
         pub const PROMPT: &str = {prompt:?};\n\
         pub const N_PREDICT: usize = {n};\n\
         pub const SCALAR_KERNELS: bool = {scalar};\n",
        model = model.display().to_string(),
        name = model.file_name().unwrap().to_string_lossy(),
    );
    fs::write(out.join("config.rs"), config).unwrap();
    let link = format!(
        "ENTRY(_start)\n\
         SECTIONS\n\
         {{\n\
           . = {LOAD_ADDRESS:#x};\n\
           .text : {{ KEEP(*(.text.boot)) *(.text .text.*) }}\n\
           .rodata : ALIGN(4096) {{ *(.rodata .rodata.*) }}\n\
           .data : ALIGN(4096) {{ *(.data .data.*) }}\n\
           .bss (NOLOAD) : ALIGN(4096) {{ __bss_start = .; *(.bss .bss.*) *(COMMON) . = ALIGN(16); __bss_end = .; }}\n\
           /* Not sections: nothing is loaded here, qemu's RAM is simply there. */\n\
           . = ALIGN(4096);\n\
           __stack_bottom = .;\n\
           . += {STACK_BYTES:#x};\n\
           __stack_top = .;\n\
           /* The static region: the loader's bump heap from the bottom, the run's arena at the top. */\n\
           . = ALIGN(4096);\n\
           __memory_start = .;\n\
           . += {memory:#x};\n\
           __memory_end = .;\n\
           /DISCARD/ : {{ *(.comment) *(.note .note.*) *(.eh_frame .eh_frame_hdr) }}\n\
         }}\n",
        memory = memory_mb << 20,
    );
    fs::write(out.join("link.x"), link).unwrap();
    println!("cargo:rustc-link-arg=-T{}", out.join("link.x").display());
    println!("cargo:rerun-if-changed=build.rs");
}
