//! NonMaxSuppression: greedy selection of the highest-scoring boxes of every batch and class,
//! dropping boxes that overlap a selected one by more than the IoU threshold. Computed in f32
//! as ONNX Runtime and the ONNX reference do.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use crate::ops::elementwise::FLOAT_TYPES;
use crate::ops::util;

struct Nms {
    center_point_box: bool,
    at: Location,
}

pub(super) fn build_nms(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let c = ctx.node.int_or("center_point_box", 0)?;
    if c != 0 && c != 1 {
        return Err(Error::attribute(&at, "center_point_box", "0 or 1", c.to_string()));
    }
    Ok(Box::new(Nms { center_point_box: c == 1, at }))
}

/// A box as `[x_min, y_min, x_max, y_max]`.
type Corners = [f32; 4];

fn corners(b: &[f32], center: bool) -> Corners {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh]
    } else {
        [b[1].min(b[3]), b[0].min(b[2]), b[1].max(b[3]), b[0].max(b[2])]
    }
}

/// Whether `a` and `b` overlap by more than `threshold` (intersection over union); boxes of
/// no area never suppress.
fn suppresses(a: &Corners, b: &Corners, threshold: f32) -> bool {
    let (x0, x1) = (a[0].max(b[0]), a[2].min(b[2]));
    if x1 <= x0 {
        return false;
    }
    let (y0, y1) = (a[1].max(b[1]), a[3].min(b[3]));
    if y1 <= y0 {
        return false;
    }
    let inter = (x1 - x0) * (y1 - y0);
    let area = |c: &Corners| (c[2] - c[0]) * (c[3] - c[1]);
    let (aa, ab) = (area(a), area(b));
    let union = aa + ab - inter;
    if inter <= 0.0 || aa <= 0.0 || ab <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

/// The selected box indices of one batch and class: by descending score (lower index first
/// among equals), at most `max_out`.
pub(crate) fn select(
    boxes: &[Corners],
    scores: &[f32],
    max_out: usize,
    iou: f32,
    score_min: Option<f32>,
) -> Vec<usize> {
    let mut cand: Vec<usize> = (0..scores.len()).filter(|&i| score_min.is_none_or(|m| scores[i] > m)).collect();
    cand.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut picked: Vec<usize> = vec![];
    for i in cand {
        if picked.len() >= max_out {
            break;
        }
        if picked.iter().all(|&p| !suppresses(&boxes[p], &boxes[i], iou)) {
            picked.push(i);
        }
    }
    picked
}

impl Nms {
    /// A 1-element scalar input, or `None` when omitted or empty.
    fn scalar_f32(&self, inputs: &[Option<ValueRef<'_>>], i: usize) -> Result<Option<f32>> {
        let Some(v) = util::opt_input(inputs, i, &self.at)? else { return Ok(None) };
        util::expect_dtype(&v, FLOAT_TYPES, i, &self.at)?;
        match util::to_f32(&v)?.as_slice() {
            [] => Ok(None),
            &[x] => Ok(Some(x)),
            _ => Err(Error::input(&self.at, i, "a 1-element tensor", format!("shape {:?}", v.shape()))),
        }
    }
}

impl Kernel for Nms {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let bv = util::input(inputs, 0, &self.at)?;
        let sv = util::input(inputs, 1, &self.at)?;
        util::expect_dtype(&bv, FLOAT_TYPES, 0, &self.at)?;
        util::expect_dtype(&sv, FLOAT_TYPES, 1, &self.at)?;
        let &[nb, n, 4] = bv.shape() else {
            return Err(Error::input(&self.at, 0, "boxes of shape [batches, boxes, 4]", format!("{:?}", bv.shape())));
        };
        let &[sb, nc, sn] = sv.shape() else {
            return Err(Error::input(
                &self.at,
                1,
                "scores of shape [batches, classes, boxes]",
                format!("{:?}", sv.shape()),
            ));
        };
        if (sb, sn) != (nb, n) {
            return Err(Error::input(
                &self.at,
                1,
                format!("scores of shape [{nb}, classes, {n}]"),
                format!("{:?}", sv.shape()),
            ));
        }
        let max_out = match util::opt_input(inputs, 2, &self.at)? {
            None => 0,
            Some(m) => {
                util::expect_dtype(&m, &[DataType::Int64], 2, &self.at)?;
                match m.as_slice::<i64>()? {
                    [] => 0,
                    &[x] => x.max(0) as usize,
                    _ => return Err(Error::input(&self.at, 2, "a 1-element tensor", format!("shape {:?}", m.shape()))),
                }
            }
        };
        let iou = self.scalar_f32(inputs, 3)?.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&iou) {
            return Err(Error::input(&self.at, 3, "an IoU threshold in [0, 1]", iou.to_string()));
        }
        let score_min = self.scalar_f32(inputs, 4)?;
        let boxes = util::to_f32(&bv)?;
        let scores = util::to_f32(&sv)?;
        let mut out: Vec<i64> = vec![];
        for b in 0..nb {
            let bx: Vec<Corners> =
                boxes[b * n * 4..(b + 1) * n * 4].chunks(4).map(|c| corners(c, self.center_point_box)).collect();
            for c in 0..nc {
                let s = &scores[(b * nc + c) * n..(b * nc + c + 1) * n];
                for i in select(&bx, s, max_out, iou, score_min) {
                    out.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
        Ok(vec![util::out(vec![out.len() / 3, 3], out)?])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::ops::layout::testkit::*;

    /// The boxes of ONNX's node tests (`test_nonmaxsuppression_*`).
    fn boxes() -> Vec<f32> {
        vec![
            0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0, 0.0, 10.1, 1.0, 11.1,
            0.0, 100.0, 1.0, 101.0,
        ]
    }

    fn nms(b: Tensor, s: Tensor, max: i64, iou: f32, score: Option<f32>, attrs: Vec<Attr>) -> Vec<i64> {
        let inputs = [Some(b), Some(s), Some(i64s(&[max])), Some(t(&[1], vec![iou])), score.map(|x| t(&[1], vec![x]))];
        let y = run1("NonMaxSuppression", 11, attrs, &inputs).unwrap();
        assert_eq!(y.shape()[1], 3);
        i64v(&y).1
    }

    #[test]
    fn matches_the_onnx_node_tests() {
        let scores = vec![0.9f32, 0.75, 0.6, 0.95, 0.5, 0.3];
        let (b, s) = (t(&[1, 6, 4], boxes()), t(&[1, 1, 6], scores.clone()));
        // suppress_by_IOU
        assert_eq!(nms(b.clone(), s.clone(), 3, 0.5, Some(0.0), vec![]), vec![0, 0, 3, 0, 0, 0, 0, 0, 5]);
        // suppress_by_IOU_and_scores
        assert_eq!(nms(b.clone(), s.clone(), 3, 0.5, Some(0.4), vec![]), vec![0, 0, 3, 0, 0, 0]);
        // limit_output_size
        assert_eq!(nms(b.clone(), s.clone(), 2, 0.5, Some(0.0), vec![]), vec![0, 0, 3, 0, 0, 0]);
        // flipped coordinates
        let flipped = vec![
            1.0, 1.0, 0.0, 0.0, 0.0, 0.1, 1.0, 1.1, 0.0, 0.9, 1.0, -0.1, 0.0, 10.0, 1.0, 11.0, 1.0, 10.1, 0.0, 11.1,
            1.0, 101.0, 0.0, 100.0,
        ];
        assert_eq!(nms(t(&[1, 6, 4], flipped), s.clone(), 3, 0.5, Some(0.0), vec![]), vec![0, 0, 3, 0, 0, 0, 0, 0, 5]);
        // center_point_box = 1
        let centers = vec![
            0.5, 0.5, 1.0, 1.0, 0.5, 0.6, 1.0, 1.0, 0.5, 0.4, 1.0, 1.0, 0.5, 10.5, 1.0, 1.0, 0.5, 10.6, 1.0, 1.0, 0.5,
            100.5, 1.0, 1.0,
        ];
        let got = nms(t(&[1, 6, 4], centers), s.clone(), 3, 0.5, Some(0.0), vec![int("center_point_box", 1)]);
        assert_eq!(got, vec![0, 0, 3, 0, 0, 0, 0, 0, 5]);
        // two batches, two classes
        let b2 = t(&[2, 6, 4], [boxes(), boxes()].concat());
        let s2 = t(&[2, 1, 6], [scores.clone(), scores.clone()].concat());
        assert_eq!(nms(b2, s2, 2, 0.5, Some(0.0), vec![]), vec![0, 0, 3, 0, 0, 0, 1, 0, 3, 1, 0, 0]);
        let s2 = t(&[1, 2, 6], [scores.clone(), scores.clone()].concat());
        assert_eq!(nms(b.clone(), s2, 2, 0.5, Some(0.0), vec![]), vec![0, 0, 3, 0, 0, 0, 0, 1, 3, 0, 1, 0]);
        // No max_output_boxes_per_class: nothing selected.
        let y = run1("NonMaxSuppression", 11, vec![], &[Some(b), Some(s)]).unwrap();
        assert_eq!(y.shape(), &[0, 3]);
    }

    #[test]
    fn identical_boxes_and_errors() {
        let same: Vec<f32> = (0..10).flat_map(|_| [0.0, 0.0, 1.0, 1.0]).collect();
        let got = nms(t(&[1, 10, 4], same), t(&[1, 1, 10], vec![0.9; 10]), 3, 0.5, Some(0.0), vec![]);
        assert_eq!(got, vec![0, 0, 0]);
        let b = t(&[1, 6, 4], boxes());
        let err =
            run1("NonMaxSuppression", 11, vec![], &[Some(b.clone()), Some(t(&[1, 1, 5], vec![0f32; 5]))]).unwrap_err();
        assert!(err.to_string().contains("input 1"), "{err}");
        let err =
            run1("NonMaxSuppression", 11, vec![], &[Some(t(&[1, 4, 6], boxes())), Some(t(&[1, 1, 4], vec![0f32; 4]))])
                .unwrap_err();
        assert!(err.to_string().contains("input 0"), "{err}");
        let inputs =
            [Some(b.clone()), Some(t(&[1, 1, 6], vec![0f32; 6])), Some(i64s(&[1])), Some(t(&[1], vec![1.5f32]))];
        let err = run1("NonMaxSuppression", 11, vec![], &inputs).unwrap_err();
        assert!(err.to_string().contains("input 3"), "{err}");
        let err = run1("NonMaxSuppression", 11, vec![int("center_point_box", 2)], &inputs).unwrap_err();
        assert!(err.to_string().contains("center_point_box"), "{err}");
    }
}
