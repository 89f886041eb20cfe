//! The terminal while `top` runs: raw mode, the alternate screen and a hidden cursor, restored on
//! every way out. [`Screen`]'s `Drop` restores it on a return (`q`, an error, a signal) and while
//! unwinding; the panic hook installed by [`Screen::enter`] restores it before the panic message is
//! printed, so the message lands on the normal screen and the shell gets a sane terminal back.
//! Only the first restore after [`Screen::enter`] acts: leaving the alternate screen a second time
//! would put the cursor back where it was on entering, over what was printed since (the panic
//! message).

use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::Duration;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;

/// The terminal in `top`'s state; back to normal when dropped.
pub struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        enable_raw_mode()?;
        ENTERED.store(true, Ordering::SeqCst);
        // From here on, a failure leaves through `restore`.
        let entered = (|| {
            execute!(io::stdout(), EnterAlternateScreen, Hide)?;
            Terminal::new(CrosstermBackend::new(io::stdout()))
        })();
        match entered {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    pub fn draw(&mut self, view: &super::draw::View<'_>) -> io::Result<()> {
        self.terminal
            .draw(|f| super::draw::draw(f, view))
            .map(|_| ())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Whether the terminal is in `top`'s state (raw mode on, and maybe the alternate screen).
static ENTERED: AtomicBool = AtomicBool::new(false);

/// Raw mode off, the alternate screen left, the cursor shown, once after each [`Screen::enter`].
/// Errors are ignored: there is no better terminal to report them on.
pub fn restore() {
    if !ENTERED.swap(false, Ordering::SeqCst) {
        return;
    }
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// What the user asked for at the keyboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Quit,
    /// The terminal changed size: draw again.
    Redraw,
}

/// What a terminal event means for `top`: `q`, Esc and Ctrl-C quit (in raw mode Ctrl-C is a key,
/// not SIGINT), a resize redraws, anything else is ignored.
pub fn input_of(event: &Event) -> Option<Input> {
    match event {
        Event::Key(KeyEvent {
            code,
            modifiers,
            kind,
            ..
        }) if *kind != KeyEventKind::Release => match code {
            KeyCode::Char('q' | 'Q') | KeyCode::Esc => Some(Input::Quit),
            KeyCode::Char('c' | 'C') if modifiers.contains(KeyModifiers::CONTROL) => {
                Some(Input::Quit)
            }
            _ => None,
        },
        Event::Resize(..) => Some(Input::Redraw),
        _ => None,
    }
}

/// Reads the terminal's events on a thread of its own (crossterm's reads block) and hands on
/// those that mean something ([`input_of`]), or the read's error. The thread ends when the
/// receiver is dropped (it looks every 100ms).
pub fn inputs() -> tokio::sync::mpsc::UnboundedReceiver<io::Result<Input>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("top-keys".into())
        .spawn(move || loop {
            if tx.is_closed() {
                return;
            }
            let got = match event::poll(Duration::from_millis(100)) {
                Ok(false) => continue,
                Ok(true) => event::read().map(|e| input_of(&e)),
                Err(e) => Err(e),
            };
            let stop = got.is_err();
            match got {
                Ok(None) => continue,
                Ok(Some(i)) => {
                    if tx.send(Ok(i)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
            if stop {
                return;
            }
        })
        .expect("a thread for the keyboard");
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_esc_and_ctrl_c_quit_a_resize_redraws() {
        let key = |code, modifiers| Event::Key(KeyEvent::new(code, modifiers));
        let none = KeyModifiers::NONE;
        assert_eq!(input_of(&key(KeyCode::Char('q'), none)), Some(Input::Quit));
        assert_eq!(input_of(&key(KeyCode::Esc, none)), Some(Input::Quit));
        assert_eq!(
            input_of(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Input::Quit)
        );
        assert_eq!(input_of(&key(KeyCode::Char('c'), none)), None);
        assert_eq!(input_of(&key(KeyCode::Char('x'), none)), None);
        assert_eq!(input_of(&Event::Resize(80, 24)), Some(Input::Redraw));
    }
}
