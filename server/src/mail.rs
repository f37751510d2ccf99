//! The mailer: sends the mail queued with notices (`emails`, written in the change's unit of work)
//! through the configured SMTP server (`[email] smtp_url`, TLS as its URL says), retrying a few times
//! over about two hours. The SMTP server is the operator's, named in the config: it is not an
//! address anyone else chooses, so it does not go through the outbound guard.

use std::sync::Arc;
use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::{parse_span, EmailConfig};
use crate::store::{Mail, Store};

/// Delays before each retry of a mail.
const RETRIES: [Duration; 4] = [
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(1800),
    Duration::from_secs(7200),
];
/// Mails claimed in one go.
const BATCH: i64 = 16;
/// The longest sleep between looks at the queue (other servers' mail, retries falling due).
const BACKSTOP: Duration = Duration::from_secs(5);

pub struct Mailer {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// `None`: no SMTP server configured; queued mail is marked failed.
    smtp: Option<(AsyncSmtpTransport<Tokio1Executor>, Mailbox)>,
    timeout: Duration,
}

impl Mailer {
    /// Checks `[email]`: a URL lettre takes, a sender that is an address, a timeout that parses.
    pub fn new(
        config: &EmailConfig,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Result<Mailer, String> {
        let timeout = parse_span(&config.timeout).map_err(|e| format!("email.timeout: {e}"))?;
        let smtp = match &config.smtp_url {
            None => None,
            Some(url) => {
                let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                    .map_err(|e| format!("email.smtp_url: {e}"))?
                    .timeout(Some(timeout))
                    .build();
                let from: Mailbox = config
                    .from
                    .parse()
                    .map_err(|e| format!("email.from {:?}: {e}", config.from))?;
                Some((transport, from))
            }
        };
        Ok(Mailer {
            store,
            clock,
            smtp,
            timeout,
        })
    }

    /// Sends until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            let now = self.clock.now();
            // The batch goes one mail at a time: the lease covers them all.
            let lease =
                chrono::Duration::from_std(self.timeout * (BATCH as u32 + 1)).unwrap_or_default();
            let batch = match self.store.claim_mails(now, now + lease, BATCH).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "mail queue not read");
                    Vec::new()
                }
            };
            let full = batch.len() as i64 == BATCH;
            for mail in batch {
                self.send(mail).await;
            }
            if full {
                continue;
            }
            tokio::select! {
                _ = self.store.mail_signal().notified() => {}
                _ = tokio::time::sleep(BACKSTOP) => {}
                _ = stop.changed() => {}
            }
        }
    }

    async fn send(&self, mail: Mail) {
        let result = match &self.smtp {
            None => Err("no SMTP server is configured ([email] smtp_url)".to_string()),
            Some((transport, from)) => deliver(transport, from, &mail).await,
        };
        let now = self.clock.now();
        let (error, next) = match &result {
            Ok(()) => (None, None),
            Err(_) if self.smtp.is_none() => (result.as_ref().err(), None),
            Err(_) => (
                result.as_ref().err(),
                RETRIES
                    .get(mail.attempts as usize)
                    .map(|d| now + chrono::Duration::from_std(*d).unwrap_or_default()),
            ),
        };
        match &result {
            Ok(()) => tracing::info!(mail = %mail.id, "notification mailed"),
            Err(e) => {
                tracing::warn!(mail = %mail.id, error = %e, retry = next.is_some(), "notification not mailed")
            }
        }
        if let Err(e) = self
            .store
            .finish_mail(
                &mail.id,
                &mail.claim_token,
                error.map(String::as_str),
                next,
                now,
            )
            .await
        {
            tracing::warn!(mail = %mail.id, error = %e, "mail outcome not recorded; it goes again when its lease ends");
        }
    }
}

async fn deliver(
    transport: &AsyncSmtpTransport<Tokio1Executor>,
    from: &Mailbox,
    mail: &Mail,
) -> Result<(), String> {
    let to: Mailbox = mail
        .to
        .parse()
        .map_err(|e| format!("the address {:?} is not valid: {e}", mail.to))?;
    let message = Message::builder()
        .from(from.clone())
        .to(to)
        .subject(mail.subject.clone())
        .header(ContentType::TEXT_PLAIN)
        .body(mail.body.clone())
        .map_err(|e| e.to_string())?;
    transport
        .send(message)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}
