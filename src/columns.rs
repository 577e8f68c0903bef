//! Arrow columns read whatever their encoding: integers of any width and
//! sign as `i64`, floats of either width as `f64`, strings plain, large,
//! views or dictionary-encoded (any key width) as `String`. A published
//! file and the same file re-saved by pandas or pyarrow hold the same
//! values in different types (pandas writes a dictionary of large strings
//! where the publisher wrote int8 keys over strings, a filter may widen
//! `int16` to `int64`); readers of such files take their columns through
//! here. A null stays `None`, as does an unsigned value beyond `i64`.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

/// `array`'s values as primitives of type `$t`, each mapped by `$f` (nulls
/// stay `None`).
macro_rules! mapped {
    ($array:expr, $t:ty, $f:expr) => {{
        let a = $array.as_primitive::<$t>();
        (0..a.len())
            .map(|i| a.is_valid(i).then(|| $f(a.value(i))).flatten())
            .collect()
    }};
}

/// An integer column's values, or `None` if it does not hold integers.
pub fn integers(array: &ArrayRef) -> Option<Vec<Option<i64>>> {
    let wide = |v| i64::try_from(v).ok();
    Some(match array.data_type() {
        DataType::Int8 => mapped!(array, Int8Type, |v: i8| Some(i64::from(v))),
        DataType::Int16 => mapped!(array, Int16Type, |v: i16| Some(i64::from(v))),
        DataType::Int32 => mapped!(array, Int32Type, |v: i32| Some(i64::from(v))),
        DataType::Int64 => mapped!(array, Int64Type, Some),
        DataType::UInt8 => mapped!(array, UInt8Type, |v: u8| Some(i64::from(v))),
        DataType::UInt16 => mapped!(array, UInt16Type, |v: u16| Some(i64::from(v))),
        DataType::UInt32 => mapped!(array, UInt32Type, |v: u32| Some(i64::from(v))),
        DataType::UInt64 => mapped!(array, UInt64Type, wide),
        _ => return None,
    })
}

/// A float column's values, or `None` if it does not hold floats.
pub fn floats(array: &ArrayRef) -> Option<Vec<Option<f64>>> {
    Some(match array.data_type() {
        DataType::Float32 => mapped!(array, Float32Type, |v: f32| Some(f64::from(v))),
        DataType::Float64 => mapped!(array, Float64Type, Some),
        _ => return None,
    })
}

/// A numeric column's values (integers or floats) as `f64`, or `None` if
/// it does not hold numbers.
pub fn numbers(array: &ArrayRef) -> Option<Vec<Option<f64>>> {
    if let Some(f) = floats(array) {
        return Some(f);
    }
    Some(match array.data_type() {
        // (beyond 2⁶³ an integer still has an f64 near it)
        DataType::UInt64 => mapped!(array, UInt64Type, |v: u64| Some(v as f64)),
        _ => integers(array)?
            .into_iter()
            .map(|v| v.map(|v| v as f64))
            .collect(),
    })
}

/// Whether a column of this type holds numbers [`numbers`] reads.
pub fn is_number(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Float32 | Float64
    )
}

/// Whether a column of this type holds strings [`strings`] reads.
pub fn is_text(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(key, values) => key.is_integer() && is_text(values),
        _ => false,
    }
}

/// A string column's values, or `None` if it does not hold strings.
pub fn strings(array: &dyn Array) -> Option<Vec<Option<String>>> {
    let owned = |i: usize, value: &str| array.is_valid(i).then(|| value.to_owned());
    Some(match array.data_type() {
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            (0..a.len()).map(|i| owned(i, a.value(i))).collect()
        }
        DataType::LargeUtf8 => {
            let a = array.as_string::<i64>();
            (0..a.len()).map(|i| owned(i, a.value(i))).collect()
        }
        DataType::Utf8View => {
            let a = array.as_string_view();
            (0..a.len()).map(|i| owned(i, a.value(i))).collect()
        }
        DataType::Dictionary(_, _) => {
            let d = array.as_any_dictionary_opt()?;
            let values = strings(d.values().as_ref())?;
            let keys = d.keys();
            d.normalized_keys()
                .into_iter()
                .enumerate()
                .map(|(i, k)| {
                    keys.is_valid(i)
                        .then(|| values.get(k).cloned().flatten())
                        .flatten()
                })
                .collect()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use arrow_array::types::Int8Type;
    use arrow_array::{
        DictionaryArray, Float32Array, Int16Array, LargeStringArray, StringArray, UInt64Array,
    };

    #[test]
    fn every_width_and_encoding_reads_the_same_values() {
        let small: ArrayRef = Arc::new(Int16Array::from(vec![Some(3), None, Some(-2)]));
        assert_eq!(integers(&small), Some(vec![Some(3), None, Some(-2)]));
        let huge: ArrayRef = Arc::new(UInt64Array::from(vec![7, u64::MAX]));
        assert_eq!(integers(&huge), Some(vec![Some(7), None]));
        let f: ArrayRef = Arc::new(Float32Array::from(vec![Some(0.5), None]));
        assert_eq!(floats(&f), Some(vec![Some(0.5), None]));
        assert_eq!(floats(&small), None);
        assert_eq!(integers(&f), None);
        assert_eq!(numbers(&small), Some(vec![Some(3.0), None, Some(-2.0)]));
        assert_eq!(numbers(&huge), Some(vec![Some(7.0), Some(u64::MAX as f64)]));
        assert_eq!(numbers(&f), floats(&f));
        assert!(is_number(small.data_type()) && !is_text(small.data_type()));

        let expected = vec![
            Some("a".to_owned()),
            None,
            Some("b".to_owned()),
            Some("a".to_owned()),
        ];
        let plain = StringArray::from(vec![Some("a"), None, Some("b"), Some("a")]);
        let large = LargeStringArray::from(vec![Some("a"), None, Some("b"), Some("a")]);
        let dict: DictionaryArray<Int8Type> = vec![Some("a"), None, Some("b"), Some("a")]
            .into_iter()
            .collect();
        let large_values = DictionaryArray::<Int8Type>::try_new(
            dict.keys().clone(),
            Arc::new(LargeStringArray::from(
                dict.values().as_string::<i32>().iter().collect::<Vec<_>>(),
            )),
        )
        .expect("a dictionary");
        for array in [&plain as &dyn Array, &large, &dict, &large_values] {
            assert_eq!(
                strings(array),
                Some(expected.clone()),
                "{:?}",
                array.data_type()
            );
        }
        assert_eq!(strings(small.as_ref()), None);
    }
}
