//! The one panic guard of the collector's `extern "C"` functions. A panic that unwinds out of an
//! `extern "C"` function aborts the process, that is kills the training job; [`guarded`] runs such a
//! function's body and answers a panic with the code the caller would get anyway: the real function's answer
//! once the hook has forwarded the call ([`Forwarded::call`]), else the hook's own error code. So the real
//! function is never called twice, and a forwarded call's result is never lost.
//!
//! It costs what `catch_unwind` costs (nothing unless something panics) and allocates nothing until then, so
//! `dlsym`'s path may use it.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, PoisonError};

/// What a guarded body forwarded: the real function's answer, once it has one.
pub struct Forwarded<R: Copy> {
    answer: Cell<Option<R>>,
}

impl<R: Copy> Forwarded<R> {
    /// Calls the real function and keeps its answer for the guard: a panic after this returns that answer.
    pub fn call(&self, real: impl FnOnce() -> R) -> R {
        let answer = real();
        self.answer.set(Some(answer));
        answer
    }
}

/// Runs `body`, the whole of the `extern "C"` function `entry`. A panic in it is logged (once per `entry`)
/// and answered with what the body forwarded, else with `refusal` (the function's documented error code);
/// it never unwinds into the caller.
pub fn guarded<R: Copy>(entry: &'static str, refusal: R, body: impl FnOnce(&Forwarded<R>) -> R) -> R {
    let forwarded = Forwarded { answer: Cell::new(None) };
    match catch_unwind(AssertUnwindSafe(|| body(&forwarded))) {
        Ok(answer) => answer,
        Err(_) => {
            let answer = forwarded.answer.get();
            log_once(entry, answer.is_some());
            answer.unwrap_or(refusal)
        }
    }
}

/// The entries whose panic was logged: a hook on the launch path could otherwise log on every launch.
/// Touched only after a panic, when allocating is no longer avoidable anyway.
static LOGGED: Mutex<Vec<&str>> = Mutex::new(Vec::new());

fn log_once(entry: &'static str, after_forwarding: bool) {
    let mut logged = LOGGED.lock().unwrap_or_else(PoisonError::into_inner);
    if logged.contains(&entry) {
        return;
    }
    logged.push(entry);
    drop(logged);
    let answered = if after_forwarding { "the real function's result" } else { "its error code" };
    crate::log(&format!(
        "{entry} panicked inside the collector (a bug: please report it with the panic message above); the \
         job continues, {entry} answered {answered}, and further panics of {entry} are not logged"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test-only entry point: panics before or after "forwarding" to `real`, as `when` says.
    extern "C" fn panicking_hook(when: i32, real_calls: &Cell<u32>) -> i32 {
        guarded("panicking_hook", -1, |forwarded| {
            if when == 0 {
                panic!("before forwarding");
            }
            let code = forwarded.call(|| {
                real_calls.set(real_calls.get() + 1);
                42
            });
            if when == 1 {
                panic!("after forwarding");
            }
            code
        })
    }

    #[test]
    fn a_panic_answers_the_refusal_before_forwarding_and_the_real_answer_after_it() {
        // Were the panic to leave the extern "C" function, this test binary would abort here.
        let real_calls = Cell::new(0);
        assert_eq!(panicking_hook(0, &real_calls), -1, "before forwarding: the hook's error code");
        assert_eq!(real_calls.get(), 0);
        assert_eq!(panicking_hook(1, &real_calls), 42, "after forwarding: the real function's answer");
        assert_eq!(real_calls.get(), 1, "the real function is called once");
        assert_eq!(panicking_hook(2, &real_calls), 42, "no panic: the body's answer");
        assert_eq!(real_calls.get(), 2);
        assert_eq!(
            LOGGED.lock().unwrap().iter().filter(|e| **e == "panicking_hook").count(),
            1,
            "logged once"
        );
    }
}
