//! A forked child's copy of a region it inherits (`OnFork::Copy`): the
//! pages only the far store holds are read into the child's memory.

use super::RegionCore;
use crate::store::StoreError;

impl RegionCore {
    /// In a `fork()`ed child: copies every far page into the child's copy
    /// of the range, which is plain private memory there (the userfaultfd
    /// registration is not inherited; resident pages came copy-on-write).
    pub(crate) fn copy_far_pages_into_child(&self) -> Result<(), StoreError> {
        for i in self.pages.far_pages() {
            let off = i * self.page_bytes;
            self.store
                .read_after_fork(off as u64, self.page_bytes, &self.mapping, off)?;
        }
        Ok(())
    }
}
