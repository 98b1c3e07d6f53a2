//! RMSNormalization (opset 23): `x / sqrt(mean(x^2) + epsilon) * scale` over the axes from
//! `axis` on, computed in f32 (f64 for double inputs).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::broadcast_to;
use crate::ops::elementwise::FLOAT_TYPES;
use crate::ops::matmul::real::{float_output, float_slice};
use crate::ops::util;

struct RmsNorm {
    axis: i64,
    epsilon: f64,
    at: Location,
}

pub(super) fn build_rms_norm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    Ok(Box::new(RmsNorm {
        axis: node.int_or("axis", -1)?,
        epsilon: f64::from(node.float_or("epsilon", 1e-5)?),
        at: node.location(),
    }))
}

impl Kernel for RmsNorm {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let s = util::input(inputs, 1, at)?;
        util::expect_dtype(&x, FLOAT_TYPES, 0, at)?;
        util::expect_dtype(&s, FLOAT_TYPES, 1, at)?;
        if x.rank() == 0 {
            return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, x.rank(), at)?;
        let norm_shape = &x.shape()[axis..];
        let row: usize = norm_shape.iter().product();
        let xs = float_slice::<f64>(&x)?;
        let scale = broadcast_to(&float_slice::<f64>(&s)?, s.shape(), norm_shape).ok_or_else(|| {
            Error::input(at, 1, format!("a scale broadcastable to {norm_shape:?}"), format!("shape {:?}", s.shape()))
        })?;
        let f32_math = x.dtype() != DataType::Double;
        let mut y = vec![0.0; xs.len()];
        for (yr, xr) in y.chunks_mut(row.max(1)).zip(xs.chunks(row.max(1))) {
            let ms = xr.iter().map(|v| v * v).sum::<f64>() / row as f64;
            let inv = 1.0 / (ms + self.epsilon).sqrt();
            let inv = if f32_math { f64::from(inv as f32) } else { inv };
            for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(&scale) {
                *o = v * inv * g;
            }
        }
        Ok(vec![float_output(x.dtype(), x.shape().to_vec(), y)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::layout::testkit::*;

    #[test]
    fn matches_numpy_and_checks_the_scale() {
        let data = rand_f32(2 * 3 * 4, 12);
        let scale = rand_f32(4, 13);
        let y =
            run1("RMSNormalization", 23, vec![], &[Some(t(&[2, 3, 4], data.clone())), Some(t(&[4], scale.clone()))])
                .unwrap();
        let want: Vec<f32> = data
            .chunks(4)
            .flat_map(|r| {
                let ms = r.iter().map(|v| v * v).sum::<f32>() / 4.0;
                let inv = 1.0 / (ms + 1e-5).sqrt();
                r.iter().zip(&scale).map(move |(v, g)| v * inv * g).collect::<Vec<_>>()
            })
            .collect();
        assert_close(&f32s(&y).1, &want, 1e-5);
        // Over the last two axes, scale [1, 4] broadcast.
        let y = run1(
            "RMSNormalization",
            23,
            vec![int("axis", 1), float("epsilon", 0.5)],
            &[Some(t(&[2, 3, 4], data.clone())), Some(t(&[1, 4], scale.clone()))],
        )
        .unwrap();
        let r = &data[..12];
        let inv = 1.0 / (r.iter().map(|v| v * v).sum::<f32>() / 12.0 + 0.5).sqrt();
        assert_close(
            &f32s(&y).1[..5],
            &[
                r[0] * inv * scale[0],
                r[1] * inv * scale[1],
                r[2] * inv * scale[2],
                r[3] * inv * scale[3],
                r[4] * inv * scale[0],
            ],
            1e-5,
        );
        let err = run1("RMSNormalization", 23, vec![], &[Some(t(&[2, 3, 4], data)), Some(t(&[3], vec![1f32; 3]))])
            .unwrap_err();
        assert!(err.to_string().contains("input 1"), "{err}");
    }
}
