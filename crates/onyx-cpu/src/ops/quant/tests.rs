//! Unit tests of the quantization family; expected values from onnx.reference.ReferenceEvaluator
//! (onnx 1.22, ml_dtypes) on seeded random data.

use half::f16;
use onyx_core::{DataType, HostBuffer, Tensor};

use crate::ops::cast::small;
use crate::ops::layout::testkit::*;

fn x() -> Tensor {
    let v: Vec<f64> = vec![
        8.163676261901855,
        -10.222660064697266,
        1.6723953485488892,
        -2.27107834815979,
        -1.8105971813201904,
        -0.8623886704444885,
        -8.079944610595703,
        -0.9277294874191284,
        -3.4608523845672607,
        13.291997909545898,
        0.9031464457511902,
        -1.4105231761932373,
        -1.1251497268676758,
        -2.6721854209899902,
        -4.220602035522461,
        -1.5632039308547974,
        1.927781581878662,
        -0.9542144536972046,
        3.8310348987579346,
        -0.7992085218429565,
        0.09703826159238815,
        6.18328332901001,
        2.180422067642212,
        -2.0209150314331055,
        -0.7313559055328369,
        2.1621005535125732,
        7.740352153778076,
        -1.0784813165664673,
        -0.9742347002029419,
        4.009254455566406,
    ];
    t(&[2, 3, 5], v.into_iter().map(|v| v as f32).collect())
}

fn codes(t: &Tensor) -> Vec<i64> {
    small::to_f64s(&t.view().unwrap()).unwrap().into_iter().map(|v| v as i64).collect()
}

fn packed(dtype: DataType, shape: &[usize], v: &[i64]) -> Tensor {
    small::from_ints(dtype, shape.to_vec(), v).unwrap()
}

fn blk_scale() -> Vec<f32> {
    vec![
        0.19729198515415192,
        0.07834404706954956,
        0.1965077966451645,
        0.13607001304626465,
        0.03830333799123764,
        0.15402087569236755,
        0.5856324434280396,
        0.22426137328147888,
        0.21192894876003265,
        0.35372400283813477,
        0.07528914511203766,
        0.16010898351669312,
    ]
}

#[test]
fn quantize_per_axis_blocked_float8_and_int16() {
    let y = run1(
        "QuantizeLinear",
        21,
        vec![int("axis", 1)],
        &[Some(x()), Some(t(&[3], vec![0.05f32, 0.1, 0.3])), Some(t(&[3], vec![-3i8, 0, 7]))],
    )
    .unwrap();
    assert_eq!(
        y.as_slice::<i8>().unwrap().iter().map(|&v| i64::from(v)).collect::<Vec<_>>(),
        vec![
            127, -128, 30, -48, -39, -9, -81, -9, -35, 127, 10, 2, 3, -2, -7, -34, 36, -22, 74, -19, 1, 62, 22, -20,
            -7, 14, 33, 3, 4, 20
        ]
    );
    let zp = packed(DataType::Uint4, &[2, 3, 2], &[3, 12, 13, 6, 14, 11, 4, 13, 5, 1, 8, 12]);
    let y = run1(
        "QuantizeLinear",
        21,
        vec![int("axis", 2), int("block_size", 3)],
        &[Some(x()), Some(t(&[2, 3, 2], blk_scale())), Some(zp)],
    )
    .unwrap();
    assert_eq!(
        (y.dtype(), codes(&y)),
        (
            DataType::Uint4,
            vec![15, 0, 11, 0, 0, 9, 0, 8, 0, 15, 15, 0, 0, 0, 0, 1, 7, 2, 15, 9, 5, 15, 15, 0, 0, 15, 15, 0, 6, 15]
        )
    );
    let attrs = vec![int("output_dtype", DataType::Float8E4M3FN.onnx_code() as i64), int("saturate", 0)];
    let y = run1("QuantizeLinear", 21, attrs, &[Some(x()), Some(Tensor::scalar(0.5f32))]).unwrap();
    assert_eq!(
        y.view().unwrap().bytes().unwrap(),
        &[
            88, 218, 69, 201, 198, 190, 216, 191, 206, 93, 62, 195, 193, 203, 208, 197, 71, 191, 79, 189, 36, 84, 73,
            200, 188, 73, 87, 193, 192, 80
        ]
    );
    let y =
        run1("QuantizeLinear", 19, vec![], &[Some(x()), Some(Tensor::scalar(0.7f32)), Some(Tensor::scalar(100i16))])
            .unwrap();
    assert_eq!(
        y.as_slice::<i16>().unwrap().iter().map(|&v| i64::from(v)).collect::<Vec<_>>(),
        vec![
            112, 85, 102, 97, 97, 99, 88, 99, 95, 119, 101, 98, 98, 96, 94, 98, 103, 99, 105, 99, 100, 109, 103, 97,
            99, 103, 111, 98, 99, 106
        ]
    );
    // No zero point: uint8.
    let y = run1(
        "QuantizeLinear",
        13,
        vec![],
        &[Some(t(&[4], vec![-1.0f32, 0.5, 1.5, 300.0])), Some(Tensor::scalar(1.0f32))],
    )
    .unwrap();
    assert_eq!(y.as_slice::<u8>().unwrap(), &[0, 0, 2, 255]);
}

#[test]
fn dequantize_per_axis_and_blocked_int4() {
    let q = t(
        &[2, 3, 5],
        vec![
            39, -28, 102, -6, -30, -91, -74, 50, 75, -54, 32, 94, -91, -58, 5, 15, -27, -27, -96, 28, 109, -78, 75,
            -83, -117, 62, -82, 63, -44, 16,
        ]
        .into_iter()
        .map(|v: i64| v as i8)
        .collect(),
    );
    let y = run1(
        "DequantizeLinear",
        21,
        vec![int("axis", 1)],
        &[Some(q), Some(t(&[3], vec![0.05f32, 0.1, 0.3])), Some(t(&[3], vec![-3i8, 0, 7]))],
    )
    .unwrap();
    assert_close(
        &f32s(&y).1,
        &vec![
            2.1000001430511475,
            -1.25,
            5.25,
            -0.15000000596046448,
            -1.350000023841858,
            -9.100000381469727,
            -7.400000095367432,
            5.0,
            7.5,
            -5.400000095367432,
            7.500000476837158,
            26.100000381469727,
            -29.400001525878906,
            -19.5,
            -0.6000000238418579,
            0.9000000357627869,
            -1.2000000476837158,
            -1.2000000476837158,
            -4.650000095367432,
            1.5500000715255737,
            10.90000057220459,
            -7.800000190734863,
            7.5,
            -8.300000190734863,
            -11.699999809265137,
            16.5,
            -26.700000762939453,
            16.80000114440918,
            -15.300000190734863,
            2.700000047683716,
        ],
        1e-6,
    );
    let q4 = packed(
        DataType::Int4,
        &[2, 3, 5],
        &[6, 5, -1, -5, -5, 4, 0, -6, 5, 6, 6, 1, 6, 1, -1, 6, 1, 3, -3, 3, 6, -8, 0, -3, -8, -7, -4, -6, 2, -5],
    );
    let zp4 = packed(DataType::Int4, &[2, 3, 2], &[1, 4, -1, -7, -8, -4, -2, -1, -4, 4, 0, 6]);
    let s16: Vec<f16> = blk_scale().into_iter().map(f16::from_f32).collect();
    let y = run1(
        "DequantizeLinear",
        21,
        vec![int("axis", -1), int("block_size", 3)],
        &[Some(q4), Some(t(&[2, 3, 2], s16)), Some(zp4)],
    )
    .unwrap();
    let got: Vec<f32> = y.as_slice::<f16>().unwrap().iter().map(|v| v.to_f32()).collect();
    assert_close(
        &got,
        &vec![
            0.986328125,
            0.7890625,
            -0.39453125,
            -0.705078125,
            -0.705078125,
            0.982421875,
            0.196533203125,
            -0.982421875,
            1.6328125,
            1.76953125,
            0.5361328125,
            0.3447265625,
            0.5361328125,
            0.7705078125,
            0.462158203125,
            4.68359375,
            1.755859375,
            2.927734375,
            -0.448486328125,
            0.89697265625,
            2.119140625,
            -0.84765625,
            0.84765625,
            -2.4765625,
            -4.24609375,
            -0.52734375,
            -0.30126953125,
            -0.451904296875,
            -0.640625,
            -1.76171875,
        ],
        1e-3,
    );
    // float8 data (zero point 0) and int32 data.
    let f8 = Tensor::from_bytes(DataType::Float8E5M2, vec![3], HostBuffer::from_vec(vec![0x3Cu8, 0xC2, 0x7C])).unwrap();
    let y = run1("DequantizeLinear", 19, vec![], &[Some(f8), Some(Tensor::scalar(2.0f32))]).unwrap();
    assert_eq!(f32s(&y).1, vec![2.0, -6.0, f32::INFINITY]);
    let y = run1("DequantizeLinear", 13, vec![], &[Some(t(&[2], vec![-70000i32, 5])), Some(Tensor::scalar(0.5f32))])
        .unwrap();
    assert_eq!(f32s(&y).1, vec![-35000.0, 2.5]);
}

#[test]
fn dynamic_quantize_linear() {
    let out = run_n("DynamicQuantizeLinear", 11, vec![], &[Some(x())], 3).unwrap();
    let y = out[0].as_tensor().unwrap().as_slice::<u8>().unwrap().iter().map(|&v| i64::from(v)).collect::<Vec<_>>();
    assert_eq!(
        y,
        vec![
            200, 0, 129, 86, 91, 102, 23, 101, 73, 255, 121, 96, 99, 82, 65, 94, 132, 101, 153, 102, 112, 178, 135, 89,
            103, 134, 195, 99, 100, 154
        ]
    );
    assert_close(&[scalar_f32(&out[1])], &[0.09221434593200684], 1e-7);
    assert_eq!(out[2].as_tensor().unwrap().as_slice::<u8>().unwrap(), &[111]);
}

#[test]
fn qlinear_matmul_with_per_column_b() {
    let a = t(
        &[2, 3, 4],
        vec![
            238, 180, 6, 54, 190, 138, 240, 180, 209, 13, 75, 173, 161, 93, 40, 150, 22, 170, 204, 170, 16, 133, 77,
            141,
        ]
        .into_iter()
        .map(|v: i64| v as u8)
        .collect(),
    );
    let b = t(
        &[4, 5],
        vec![173, 50, 9, 126, 158, 31, 235, 122, 246, 136, 185, 197, 126, 100, 170, 4, 157, 134, 38, 52]
            .into_iter()
            .map(|v: i64| v as u8)
            .collect(),
    );
    let inputs = [
        Some(a),
        Some(Tensor::scalar(0.02f32)),
        Some(Tensor::scalar(113u8)),
        Some(b),
        Some(t(&[5], vec![0.01f32, 0.03, 0.02, 0.015, 0.05])),
        Some(t(&[5], vec![120u8, 110, 130, 128, 127])),
        Some(Tensor::scalar(0.6f32)),
        Some(Tensor::scalar(100u8)),
    ];
    let y = run1("QLinearMatMul", 21, vec![], &inputs).unwrap();
    assert_eq!(y.shape(), &[2, 3, 5]);
    assert_eq!(
        y.as_slice::<u8>().unwrap().iter().map(|&v| i64::from(v)).collect::<Vec<_>>(),
        vec![
            100, 89, 90, 108, 107, 101, 113, 93, 97, 105, 102, 81, 93, 92, 93, 98, 90, 97, 98, 92, 96, 123, 107, 100,
            96, 96, 107, 108, 101, 89
        ]
    );
}

#[test]
fn conv_integer_and_qlinear_conv() {
    let xc = t(
        &[1, 2, 5, 4],
        vec![
            8, 189, 174, 99, 243, 97, 78, 231, 20, 100, 6, 88, 185, 88, 125, 122, 15, 23, 76, 139, 18, 234, 218, 143,
            186, 189, 2, 241, 12, 214, 212, 189, 34, 207, 244, 209, 176, 64, 141, 122,
        ]
        .into_iter()
        .map(|v: i64| v as u8)
        .collect(),
    );
    let wc = t(
        &[3, 2, 3, 2],
        vec![
            93, -41, -24, -62, -4, 17, -11, -47, 12, 29, -86, 20, 52, -102, 29, -16, 109, -29, -48, 52, 93, -106, -101,
            -85, -41, 2, 16, -25, 97, 41, -86, -44, -78, -78, 87, 109,
        ]
        .into_iter()
        .map(|v: i64| v as i8)
        .collect(),
    );
    let attrs = || vec![ints("pads", &[1, 0, 1, 1]), ints("strides", &[2, 1])];
    let y = run1(
        "ConvInteger",
        10,
        attrs(),
        &[Some(xc.clone()), Some(wc.clone()), Some(Tensor::scalar(120u8)), Some(t(&[3], vec![3i8, -2, 0]))],
    )
    .unwrap();
    assert_eq!(y.shape(), &[1, 3, 3, 4]);
    assert_eq!(
        y.as_slice::<i32>().unwrap().iter().map(|&v| i64::from(v)).collect::<Vec<_>>(),
        vec![
            -5299, -10373, 15794, -10772, 21410, 10559, -14812, 1846, 12300, -4997, -5630, -1561, -23971, 3565, 2866,
            1876, -3852, -28842, -22090, -2598, 24611, -9429, -671, -3207, 19798, -27594, -4649, 19164, -6815, 6325,
            14242, -12914, 1584, -9338, -17754, -7588
        ]
    );
    let inputs = [
        Some(xc),
        Some(Tensor::scalar(0.03f32)),
        Some(Tensor::scalar(120u8)),
        Some(wc),
        Some(t(&[3], vec![0.01f32, 0.02, 0.005])),
        Some(Tensor::scalar(0i8)),
        Some(Tensor::scalar(0.9f32)),
        Some(Tensor::scalar(128u8)),
        Some(t(&[3], vec![100i32, -2000, 5])),
    ];
    let y = run1("QLinearConv", 10, attrs(), &inputs).unwrap();
    assert_eq!(
        y.as_slice::<u8>().unwrap().iter().map(|&v| i64::from(v)).collect::<Vec<_>>(),
        vec![
            126, 125, 134, 125, 135, 132, 123, 129, 132, 126, 126, 128, 110, 129, 128, 128, 124, 107, 112, 124, 143,
            120, 126, 124, 131, 123, 127, 131, 127, 129, 130, 126, 128, 126, 125, 127
        ]
    );
}

#[test]
fn invalid_parameters_are_errors() {
    let err = run1("QuantizeLinear", 21, vec![int("axis", 1)], &[Some(x()), Some(t(&[2], vec![1f32, 2.]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 1") && err.contains("3 values"), "{err}");
    let err = run1(
        "QuantizeLinear",
        21,
        vec![int("axis", 2), int("block_size", 2)],
        &[Some(x()), Some(t(&[2, 3, 2], blk_scale()))],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("3 blocks of 2"), "{err}");
    let err = run1("QuantizeLinear", 21, vec![int("axis", 5)], &[Some(x()), Some(t(&[3], vec![1f32; 3]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("axis 5"), "{err}");
    let err = run1("QuantizeLinear", 21, vec![int("output_dtype", 1)], &[Some(x()), Some(Tensor::scalar(1f32))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("output_dtype"), "{err}");
    let err = run1(
        "QuantizeLinear",
        21,
        vec![int("output_dtype", 3)],
        &[Some(x()), Some(Tensor::scalar(1f32)), Some(Tensor::scalar(1u8))],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("input 2"), "{err}");
    let err = run1(
        "DequantizeLinear",
        21,
        vec![],
        &[Some(t(&[2], vec![1u8, 2])), Some(Tensor::scalar(1f32)), Some(Tensor::scalar(1i8))],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("input 2") && err.contains("uint8"), "{err}");
    let err = run1("DequantizeLinear", 21, vec![], &[Some(t(&[2], vec![1f32, 2.])), Some(Tensor::scalar(1f32))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 0"), "{err}");
    let err = run1(
        "QLinearMatMul",
        10,
        vec![],
        &[
            Some(t(&[2, 3], vec![0u8; 6])),
            Some(Tensor::scalar(1f32)),
            None,
            Some(t(&[2, 2], vec![0u8; 4])),
            Some(Tensor::scalar(1f32)),
            None,
            Some(Tensor::scalar(1f32)),
            None,
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("[2, 3]") && err.contains("[2, 2]"), "{err}");
    let err = run1(
        "ConvInteger",
        10,
        vec![],
        &[
            Some(t(&[1, 1, 3, 3], vec![0u8; 9])),
            Some(t(&[1, 1, 2, 2], vec![0i8; 4])),
            None,
            Some(t(&[2], vec![0i8; 2])),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("input 3"), "{err}");
}
