//! The stats CSV: header-mapped columns, both shape spellings, typed values, line-numbered errors.

use accutrace_formats::dump::{parse_stats_csv, write_stats_csv, Io, StatsRow};
use accutrace_formats::DType;

const STANDARD: &str = "Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,Nan Count,Negative Inf Count,Positive Inf Count
Input,0,48,DT_FLOAT16,FORMAT_ND,2x3x4,65504,-3.5,0.25,24,0,1,2
Output,0,24,DT_FLOAT,FORMAT_NC1HWC0,\"[2,3,4]\",inf,nan,1e-3,24,3,0,0
";

#[test]
fn standard_rows_parse_into_typed_fields() {
    let rows = parse_stats_csv(STANDARD.as_bytes()).unwrap();
    assert_eq!(rows.len(), 2);
    let r = &rows[0];
    assert_eq!((r.io, r.index, r.data_size), (Io::Input, 0, Some(48)));
    assert_eq!((r.dtype, r.format), (Some(DType::FLOAT16), Some(2)));
    assert_eq!(r.shape.as_deref(), Some(&[2, 3, 4][..]));
    assert_eq!((r.max, r.min, r.avg), (Some(65504.0), Some(-3.5), Some(0.25)));
    assert_eq!(
        (r.count, r.nan_count, r.neg_inf_count, r.pos_inf_count),
        (Some(24), Some(0), Some(1), Some(2))
    );
    let r = &rows[1];
    assert_eq!((r.io, r.format, r.dtype), (Io::Output, Some(3), Some(DType::FLOAT)));
    assert_eq!(r.shape.as_deref(), Some(&[2, 3, 4][..]));
    assert_eq!(r.max, Some(f64::INFINITY));
    assert!(r.min.unwrap().is_nan());
}

#[test]
fn columns_are_found_by_name_in_any_order_and_subset() {
    let text =
        "Index,Input/Output,Max Value,Extra Column,L2Norm Value,Shape\n1,output,2.5,zzz,4,[]\n3,Input,,,,\n";
    let rows = parse_stats_csv(text.as_bytes()).unwrap();
    assert_eq!(
        (rows[0].io, rows[0].index, rows[0].max, rows[0].l2norm),
        (Io::Output, 1, Some(2.5), Some(4.0))
    );
    assert_eq!(rows[0].shape, Some(vec![]));
    assert_eq!((rows[0].dtype, rows[0].count), (None, None));
    assert_eq!((rows[1].io, rows[1].index, rows[1].max, rows[1].shape.as_ref()), (Io::Input, 3, None, None));
}

#[test]
fn malformed_rows_name_the_line_and_offset() {
    let bad_number = "Input/Output,Index,Max Value\nInput,0,1\nOutput,1,abc\n";
    let err = parse_stats_csv(bad_number.as_bytes()).unwrap_err();
    assert_eq!(err.offset, Some(39));
    assert_eq!(err.problem, "line 3: Max Value \"abc\" is not a number");

    let err = parse_stats_csv(b"Input/Output,Index,Data Type\nInput,0,DT_NOPE\n").unwrap_err();
    assert_eq!(err.problem, "line 2: Data Type \"DT_NOPE\" is not a known dtype");
    let err = parse_stats_csv(b"Input/Output,Index,Shape\nInput,0,2xQ\n").unwrap_err();
    assert!(err.problem.starts_with("line 2: Shape \"2xQ\" has a non-numeric dimension"), "{err}");
    let err = parse_stats_csv(b"Input/Output,Index\nSideways,0\n").unwrap_err();
    assert_eq!(err.problem, "line 2: Input/Output is \"Sideways\", not Input or Output");
    let err = parse_stats_csv(b"Index,Max Value\n0,1\n").unwrap_err();
    assert_eq!(
        (err.offset, err.problem.as_str()),
        (Some(0), "line 1: stats CSV header lacks the \"Input/Output\" column")
    );
    assert!(parse_stats_csv(b"").unwrap_err().problem.contains("empty"));
    let err = parse_stats_csv(b"Input/Output,Index,Format\nInput,0,FORMAT_WHAT\n").unwrap_err();
    assert!(err.problem.contains("not a known format"), "{err}");
}

#[test]
fn written_csv_reads_back() {
    let rows = vec![
        StatsRow {
            io: Io::Output,
            index: 2,
            data_size: Some(8),
            dtype: Some(DType::BF16),
            format: Some(29),
            shape: Some(vec![2, 2]),
            max: Some(1.5),
            min: Some(f64::NEG_INFINITY),
            avg: Some(-0.125),
            count: Some(4),
            nan_count: Some(0),
            neg_inf_count: Some(1),
            pos_inf_count: Some(0),
            l2norm: Some(3.0),
        },
        StatsRow {
            io: Io::Input,
            index: 0,
            data_size: None,
            dtype: Some(DType::from_code(999)),
            format: Some(777),
            shape: Some(vec![]),
            max: None,
            min: None,
            avg: None,
            count: None,
            nan_count: None,
            neg_inf_count: None,
            pos_inf_count: None,
            l2norm: None,
        },
    ];
    let text = write_stats_csv(&rows);
    assert!(text.starts_with("Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,Nan Count,Negative Inf Count,Positive Inf Count,L2Norm Value\n"));
    assert!(text.contains("Output,2,8,DT_BF16,FORMAT_FRACTAL_NZ,2x2,1.5,-inf,-0.125,4,0,1,0,3\n"), "{text}");
    assert_eq!(parse_stats_csv(text.as_bytes()).unwrap(), rows);
}

/// What the runtime's stats writer (hicann/runtime src/dfx/adump/adump/adx_dump_record.cpp) hands a dump
/// callback: a `dump_stats` selection moves `Count` after `Shape` and names the norm `l2norm`; formats are
/// bare names (three spelt its own way), a type or format missing from its table is `UNKNOW`, a tensor it
/// cannot measure has `NA` cells, and the chunk is a C string whose length counts its NUL.
#[test]
fn the_runtime_s_callback_csv_reads() {
    let text = b"Input/Output,Index,Data Size,Data Type,Format,Shape,Count,Max Value,l2norm\n\
Input,0,24,DT_FLOAT,ND,2x3,6,1.5,2.5\n\
Input,1,8,UNKNOW,DHWCH,2x2,4,NA,NA\n\
Output,0,4,DT_BF16,NYUV_A,-,1,inf,0.5\n\0";
    let rows = parse_stats_csv(text).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!((rows[0].dtype, rows[0].format, rows[0].count), (Some(DType::FLOAT), Some(2), Some(6)));
    assert_eq!((rows[0].max, rows[0].l2norm), (Some(1.5), Some(2.5)));
    assert_eq!((rows[1].dtype, rows[1].format, rows[1].max), (None, Some(31), None));
    assert_eq!((rows[2].io, rows[2].format, rows[2].shape.as_ref()), (Io::Output, Some(46), None));
    assert_eq!(rows[2].max, Some(f64::INFINITY));
    // The same text without the terminator, and the runtime's default header, read the same way.
    assert_eq!(parse_stats_csv(&text[..text.len() - 1]).unwrap(), rows);
    let default = format!("{STANDARD}\0");
    // Debug text: STANDARD holds a NaN, which is not equal to itself.
    let debug = |bytes: &[u8]| format!("{:?}", parse_stats_csv(bytes).unwrap());
    assert_eq!(debug(default.as_bytes()), debug(STANDARD.as_bytes()));
}

#[test]
fn a_later_part_of_an_op_s_csv_is_told_by_its_missing_header() {
    use accutrace_formats::dump::stats_csv::stats_csv_header_line;
    let header = STANDARD.lines().next().unwrap();
    assert_eq!(stats_csv_header_line(STANDARD.as_bytes()), Some(header.as_bytes()));
    assert_eq!(stats_csv_header_line(format!("{header}\r\nInput,0\r\n").as_bytes()), Some(header.as_bytes()));
    // The runtime's second part of an op with more than 10 tensors: rows only, a C string.
    assert_eq!(stats_csv_header_line(b"Input,10,48,DT_FLOAT16,FORMAT_ND,2x3x4\nOutput,0\n\0"), None);
    assert_eq!(stats_csv_header_line(b" output,0,4\n"), None);
}

#[test]
fn a_header_repeated_before_a_later_part_is_not_a_row() {
    let header = STANDARD.lines().next().unwrap();
    let rows: Vec<&str> = STANDARD.lines().skip(1).collect();
    let appended = format!("{header}\n{}\n{header}\n{}\n", rows[0], rows[1]);
    let parsed = parse_stats_csv(appended.as_bytes()).unwrap();
    // Debug text: a NaN cell is NaN on both sides.
    assert_eq!(format!("{parsed:?}"), format!("{:?}", parse_stats_csv(STANDARD.as_bytes()).unwrap()));
}
