//! Listener slots: the open notification streams each owner holds, counted against
//! `MCPT_LIMIT_LISTENERS`.

use std::time::Duration;

use redis::AsyncCommands;

use crate::handles::Limits;
use crate::{StoreResult, keys};

impl Limits<'_> {
    /// Hold (or renew) listener `id`'s slot among `owner`'s open streams for `hold`;
    /// `false` when the owner already has `most` open (0: no limit).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn hold_listener(
        self,
        owner: &str,
        id: &str,
        most: u32,
        hold: Duration,
    ) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let held: i64 = self
            .store
            .scripts
            .listener
            .key(keys::listeners_key(owner))
            .arg(id)
            .arg(most)
            .arg(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX))
            .invoke_async(&mut con)
            .await?;
        Ok(held == 1)
    }

    /// Give listener `id`'s slot back.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn release_listener(self, owner: &str, id: &str) -> StoreResult<()> {
        let mut con = self.store.con.clone();
        let _: () = con.zrem(keys::listeners_key(owner), id).await?;
        Ok(())
    }
}
