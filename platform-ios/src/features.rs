//! CPU features from sysctl, for core's kernel dispatch.
//!
//! iOS has no auxiliary vector; the kernel publishes features as `hw.optional.*` integers.
//! iOS 15 and later name them after the Arm features (`hw.optional.arm.FEAT_DotProd`); iOS 12
//! has only the older keys (`hw.optional.neon`, `hw.optional.armv8_2_fhm`, ...), none of which
//! says "dotprod". A missing key therefore means "no": an A7 (which really has no sdot) and an
//! A12 on iOS 12 both run the ARMv8.0 kernels, and no build ever reaches an sdot on a core that
//! lacks it. The decoding is a pure function over a key lookup, tested on recorded `sysctl
//! hw.optional` output from real devices.

use smolrun_core::platform::CpuFeatures;

/// Parses `sysctl hw.optional` output (`key: value` per line) into (key, integer) pairs.
pub fn parse_sysctl_output(text: &str) -> Vec<(String, i64)> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            Some((key.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Decodes the features from a sysctl lookup (`None` for a key the kernel does not have).
/// NEON is part of every ARMv8 core; fp16 means half-precision NEON arithmetic (FEAT_FP16),
/// not the conversions that `hw.optional.neon_fp16` reports.
pub fn features_from_sysctl(lookup: impl Fn(&str) -> Option<i64>) -> CpuFeatures {
    let on = |key: &str| lookup(key).is_some_and(|v| v != 0);
    CpuFeatures {
        neon: cfg!(target_arch = "aarch64") || on("hw.optional.neon") || on("hw.optional.AdvSIMD"),
        dotprod: on("hw.optional.arm.FEAT_DotProd"),
        fp16: on("hw.optional.arm.FEAT_FP16"),
        i8mm: on("hw.optional.arm.FEAT_I8MM"),
        ..CpuFeatures::default()
    }
}

/// One integer sysctl by name; None when the key does not exist on this kernel.
#[cfg(target_os = "ios")]
pub fn sysctl_int(name: &str) -> Option<i64> {
    let name = std::ffi::CString::new(name).ok()?;
    let mut value = [0u8; 8];
    let mut len: libc::size_t = value.len();
    // SAFETY: name is NUL-terminated; the kernel writes at most `len` bytes into `value` and
    // updates `len` to what it wrote; no new value is set (null, 0).
    let status = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    match (status, len) {
        (0, 4) => Some(i32::from_ne_bytes([value[0], value[1], value[2], value[3]]) as i64),
        (0, 8) => Some(i64::from_ne_bytes(value)),
        _ => None,
    }
}

/// The features of the CPU this process runs on.
#[cfg(target_os = "ios")]
pub fn detect_features() -> CpuFeatures {
    features_from_sysctl(sysctl_int)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    fn decode(name: &str) -> CpuFeatures {
        let values = parse_sysctl_output(&fixture(name));
        features_from_sysctl(|key| values.iter().find(|(k, _)| k == key).map(|&(_, v)| v))
    }

    #[test]
    fn ipad_air_a7_on_ios12_has_neon_only() {
        let f = decode("sysctl-hw-optional-ipad-air-a7-ios12");
        assert!(f.neon);
        assert!(!f.dotprod && !f.fp16 && !f.i8mm);
    }

    #[test]
    fn a14_on_ios16_has_dotprod_and_fp16_not_i8mm() {
        let f = decode("sysctl-hw-optional-iphone12-a14-ios16");
        assert!(f.neon && f.dotprod && f.fp16);
        assert!(!f.i8mm);
        assert!(!f.avx2, "no x86 feature from an ARM sysctl");
    }

    #[test]
    fn m2_has_i8mm() {
        let f = decode("sysctl-hw-optional-m2-macos14");
        assert!(f.dotprod && f.fp16 && f.i8mm);
    }

    #[test]
    fn sysctl_output_lines() {
        let values = parse_sysctl_output("hw.optional.neon: 1\nbroken\nhw.x: y\nhw.ncpu: 2\n");
        assert_eq!(
            values,
            vec![
                ("hw.optional.neon".to_string(), 1),
                ("hw.ncpu".to_string(), 2)
            ]
        );
        // A key present with 0 is "no", like a missing one.
        let f = features_from_sysctl(|k| (k == "hw.optional.arm.FEAT_DotProd").then_some(0));
        assert!(!f.dotprod);
    }
}
